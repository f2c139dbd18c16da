"""BiasLab settings. Everything configurable comes from the environment (docs/reference/settings.md)."""

from __future__ import annotations

import os
from pathlib import Path

from config import csp
from config.env import (
    env_bool,
    env_cache,
    env_database,
    env_int,
    env_list,
    env_production_secret,
    env_proxy_ssl_header,
    env_rate,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("BIASLAB_VAR_DIR", str(BASE_DIR / "var")))

# Production mode unless told otherwise (bin/demo, bin/test and tests/settings.py turn it off).
DEBUG = env_bool("DJANGO_DEBUG", default=False)
# In development, the site's own 404 and CSRF pages instead of Django's technical ones (bin/demo).
BIASLAB_FRIENDLY_ERRORS = env_bool("BIASLAB_FRIENDLY_ERRORS", default=False)
DEVELOPMENT_SECRET_KEY = "insecure-local-development-key-change-me"
SECRET_KEY = (
    env_str("DJANGO_SECRET_KEY", DEVELOPMENT_SECRET_KEY)
    if DEBUG
    else env_production_secret("DJANGO_SECRET_KEY", known_insecure=(DEVELOPMENT_SECRET_KEY,))
)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])

# BiasLab's own apps; a protocol (protocols.*) is registered by being listed here, in the order
# studies list them. docs/_hooks/reference.py documents these apps' commands.
PROJECT_APPS = [
    "accounts", "studies", "annotate", "detectors", "generation", "reports", "estimates", "crowd",
    "quality", "protocols.gender", "protocols.attributes", "protocols.pair_change",
    "protocols.objects", "protocols.questions",
]  # fmt: skip
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    *PROJECT_APPS,
    "drf_spectacular",
    "drf_spectacular_sidecar",
]

MIDDLEWARE = [
    # First, so it sees every /api/ answer last (docs/explanation/web-side.md).
    "config.api.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "config.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "config.errors.ErrorPagesMiddleware",
    # A join link's participant reaches their study's labeling screen and nothing else.
    "crowd.middleware.ParticipantMiddleware",
]

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "annotate.context_processors.roles",
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"

DATABASES = {
    "default": env_database(
        "DATABASE_URL",
        f"sqlite:///{VAR_DIR / 'biaslab.sqlite3'}",
        base_dir=BASE_DIR,
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A fresh clone has no var/ yet; SQLite creates the file but not its folder.
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    # Several annotators write at once: wait for the write lock instead of failing fast.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )

elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # JIT made the key press's statements slow on large studies (docs/how-to/deploy.md).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("options", "-c jit=off")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
MEDIA_URL = "media/"
MEDIA_ROOT = Path(env_str("BIASLAB_MEDIA_ROOT", str(VAR_DIR / "media")))

# --- HTTPS: production is HTTPS-only; HSTS stays off until set (browsers remember it) ---------
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
# Load balancers probe the health check over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
# Origins allowed to POST forms besides the site's own (a public name the proxy does not forward).
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
CSRF_FAILURE_VIEW = "config.errors.csrf_failure"
# Content-Security-Policy (config/csp.py): "off" sends none.
_csp = env_str("BIASLAB_CSP", csp.DEFAULT_POLICY)
BIASLAB_CSP = "" if _csp.strip().lower() == "off" else _csp
BIASLAB_CSP_REPORT_ONLY = env_bool("BIASLAB_CSP_REPORT_ONLY", default=False)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# --- Caches: rate limits and reports; locmem:// is per process, share one with several ----------
CACHES = {
    "default": {
        **env_cache("BIASLAB_CACHE_URL", "locmem://"),
        # Several deployments (or test runs) may share one Redis: each keeps to its own keys.
        "KEY_PREFIX": env_str("BIASLAB_CACHE_KEY_PREFIX", "biaslab"),
    }
}

# Sessions from Redis when there is one (a locmem cache would serve sessions a logout in another
# process deleted); docs/how-to/deploy.md.
SESSION_ENGINE = (
    "django.contrib.sessions.backends.cached_db"
    if CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    else "django.contrib.sessions.backends.db"
)

# --- API and logins (accounts/) ---------------------------------------------------------------
BIASLAB_API_TOKEN_HOURS = env_int("BIASLAB_API_TOKEN_HOURS", 24)
# Failed logins per (username, address) within the minutes that lock the pair out (0 = off).
BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = env_int("BIASLAB_LOGIN_LOCKOUT_ATTEMPTS", 5)
BIASLAB_LOGIN_LOCKOUT_MINUTES = env_int("BIASLAB_LOGIN_LOCKOUT_MINUTES", 15)
# The address `add_annotators` prints new accounts' password links under.
BIASLAB_BASE_URL = env_str("BIASLAB_BASE_URL", "http://127.0.0.1:8000")

REST_FRAMEWORK = {
    # Token first: a caller without credentials gets the first class's challenge, 401, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_THROTTLE_CLASSES": [
        "accounts.throttles.AnonRateThrottle",
        "accounts.throttles.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env_rate("BIASLAB_API_THROTTLE_ANON", "60/minute"),
        "user": env_rate("BIASLAB_API_THROTTLE_USER", "600/minute"),
        "login": env_rate("BIASLAB_API_THROTTLE_LOGIN", "10/minute"),
        "join": env_rate("BIASLAB_JOIN_THROTTLE", "60/hour"),
    },
    # Proxies whose X-Forwarded-For entries are trusted; 0 = REMOTE_ADDR.
    "NUM_PROXIES": env_int("BIASLAB_NUM_PROXIES", 0),
    # The schema, the error shape and strict input: config/api.py.
    "DEFAULT_SCHEMA_CLASS": "config.api.ApiSchema",
    "EXCEPTION_HANDLER": "config.api.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "config.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "BiasLab API",
    "DESCRIPTION": (
        "Studies, labels, disputes, agreement, ground truth and detector predictions. Log in with "
        "a session or a token (`POST /api/token/`, then `Authorization: Token <key>`). Every "
        "error is JSON of one shape (`Error`); a method an endpoint lacks is 405 for everyone."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    "PATH_CONVERTER_OVERRIDES": {
        "id": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 2**63 - 1}
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "annotate.api.links.schema_links",
    ],
    "ENUM_NAME_OVERRIDES": {
        "ItemStateEnum": "annotate.models.ItemState",
        "PredictionStatusEnum": "detectors.models.PredictionStatus",
        "RunStatusEnum": "detectors.models.RunStatus",
    },
}

# --- Image import -------------------------------------------------------------------------
BIASLAB_IMAGE_FORMATS = env_list("BIASLAB_IMAGE_FORMATS", ["PNG", "JPEG", "WEBP"])
BIASLAB_MAX_IMAGE_PIXELS = env_int("BIASLAB_MAX_IMAGE_PIXELS", 40_000_000)
BIASLAB_MAX_IMAGE_BYTES = env_int("BIASLAB_MAX_IMAGE_BYTES", 256 * 1024**2)
BIASLAB_MAX_UPLOAD_BYTES = env_int("BIASLAB_MAX_UPLOAD_BYTES", 2 * 1024**3)
BIASLAB_IMPORT_PROCESSES = env_int("BIASLAB_IMPORT_PROCESSES", min(8, os.cpu_count() or 1))
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2
FILE_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2

# --- Labeling -----------------------------------------------------------------------------
BIASLAB_CLAIM_TIMEOUT_SECONDS = env_int("BIASLAB_CLAIM_TIMEOUT_SECONDS", 15 * 60)
BIASLAB_IMPORT_BATCH_ROWS = env_int("BIASLAB_IMPORT_BATCH_ROWS", 2000)
BIASLAB_SQL_MAX_VARIABLES = env_int("BIASLAB_SQL_MAX_VARIABLES", 999)
# --- Few-label estimates ---------------------------------------------------------------------
ESTIMATE_JOB_STALE_SECONDS = env_int("ESTIMATE_JOB_STALE_SECONDS", 60)


LOG_LEVEL = env_str("BIASLAB_LOG_LEVEL", "WARNING")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "client_error_one_line": {
            "()": "django.utils.log.CallbackFilter",
            "callback": "ext://config.logs.client_error_one_line",
        }
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["client_error_one_line"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # One handler, the root's: Django's own would print every 403 twice in development.
    "loggers": {"django": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}},
}
