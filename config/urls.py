from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from rest_framework.schemas import get_schema_view

from config import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("annotate/", include("annotate.urls")),
    path("detectors/", include("detectors.urls")),
    path("reports/", include("reports.urls")),
    path("api/", include("annotate.api_urls")),
    path("api/", include("detectors.api_urls")),
    path("api/", include("reports.api_urls")),
    path(
        "api/schema/",
        get_schema_view(
            title="BiasLab API",
            version="1.0.0",
            description="Labels, ground truth, predictions.",
            # The whole API for everyone who may log in; each endpoint still checks its role.
            public=True,
        ),
        name="openapi-schema",
    ),
    path(f"{settings.MEDIA_URL.strip('/')}/<path:path>", views.media, name="media"),
]
