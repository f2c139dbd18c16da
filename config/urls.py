from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from accounts import views as account_views
from config import csp, views

# Swagger UI and Redoc run only under a policy of their own (config/csp.py; docs/how-to/deploy.md).
api_docs = csp.with_policy(csp.API_DOCS_POLICY)
#: The apps whose ``api_urls`` serve /api/, in the order they are tried.
API_APPS = ("accounts", "annotate", "detectors", "estimates", "crowd", "quality")

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", account_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/set-password/done/", account_views.PasswordSetDoneView.as_view(), name="password_set_done"
    ),
    path(
        "accounts/set-password/<uidb64>/<token>/",
        account_views.PasswordSetView.as_view(),
        name="password_set",
    ),
    path("admin/", admin.site.urls),
    path("annotate/", include("annotate.urls")),
    path("", include("crowd.urls")),
    path("quality/", include("quality.urls")),
    path("detectors/", include("detectors.urls")),
    path("reports/estimate/", include("estimates.urls")),
    path("reports/", include("reports.urls")),
    *(path("api/", include(f"{app}.api_urls")) for app in API_APPS),
    # The API schema and its pages (drf-spectacular, assets from the sidecar package).
    # YAML by default, JSON with ?format=json; logged-in users only (SPECTACULAR_SETTINGS).
    path("api/schema/", SpectacularAPIView.as_view(), name="openapi-schema"),
    path(
        "api/schema/swagger/",
        api_docs(SpectacularSwaggerSplitView.as_view(url_name="openapi-schema")),
        name="openapi-swagger",
    ),
    path(
        "api/schema/redoc/",
        api_docs(SpectacularRedocView.as_view(url_name="openapi-schema", template_name="api/redoc.html")),
        name="openapi-redoc",
    ),
    path(f"{settings.MEDIA_URL.strip('/')}/<path:path>", views.media, name="media"),
]

# Error pages in the site's layout (config/errors.py); /api/ paths keep Django's own.
handler400 = "config.errors.bad_request"
handler403 = "config.errors.permission_denied"
handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"
