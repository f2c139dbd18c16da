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

# Production mode unless told otherwise: a server started without configuration must not show
# tracebacks or run with the development key. bin/demo, bin/test and tests/settings.py turn
# development mode on explicitly.
DEBUG = env_bool("DJANGO_DEBUG", default=False)
# In development (DEBUG), answer a missing page with the site's own 404 page instead of Django's
# technical one (and a failed CSRF check with the site's page): what a demo's visitor should see
# (bin/demo sets it). Server errors keep Django's traceback page.
BIASLAB_FRIENDLY_ERRORS = env_bool("BIASLAB_FRIENDLY_ERRORS", default=False)
DEVELOPMENT_SECRET_KEY = "insecure-local-development-key-change-me"
# Production mode (DEBUG off) never runs with a missing, weak or repository-known secret.
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
]

MIDDLEWARE = [
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

# SQLite is the embedded default; DATABASE_URL=postgres://... switches to PostgreSQL. A relative
# SQLite path is relative to the project folder; a URL that cannot be read is one clear line.
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
    # No JIT compilation: the labeling key press's claim statement is cheap to run but, on a study
    # of 250,000+ items, estimated costly enough to be compiled first, which took 640 ms of its
    # 680 ms at 1,000,000 items. Short statements are this app's work; JIT only pays off on
    # long analytic scans.
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

# --- HTTPS and browser security -----------------------------------------------------------
# Production (DEBUG off) is HTTPS-only by default: plain HTTP is redirected and the session and
# CSRF cookies never travel over it. Behind a proxy that terminates TLS, the proxy must say so
# (DJANGO_SECURE_PROXY_SSL_HEADER), or every request looks like plain HTTP and is redirected
# forever. HSTS is sticky in browsers for its whole duration, so it stays off until set.
SECURE_PROXY_SSL_HEADER = env_proxy_ssl_header("DJANGO_SECURE_PROXY_SSL_HEADER")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
# Load balancers probe the health check over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
# Origins (scheme://host[:port]) allowed to POST forms besides the site's own, e.g. when the
# public name differs from the Host the proxy forwards.
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
# A failed CSRF check answers in the site's layout (Django's own page in development and on /api/).
CSRF_FAILURE_VIEW = "config.errors.csrf_failure"
# Content-Security-Policy (config/csp.py): "off" sends none.
_csp = env_str("BIASLAB_CSP", csp.DEFAULT_POLICY)
BIASLAB_CSP = "" if _csp.strip().lower() == "off" else _csp
BIASLAB_CSP_REPORT_ONLY = env_bool("BIASLAB_CSP_REPORT_ONLY", default=False)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# --- Caches -------------------------------------------------------------------------------
# The API's rate limits and the report cache live here. locmem:// is per server process: with
# several processes, point BIASLAB_CACHE_URL at a shared cache (redis://…, db://…).
CACHES = {
    "default": {
        **env_cache("BIASLAB_CACHE_URL", "locmem://"),
        # Several deployments (or test runs) may share one Redis: each keeps to its own keys.
        "KEY_PREFIX": env_str("BIASLAB_CACHE_KEY_PREFIX", "biaslab"),
    }
}

# Sessions: with a shared Redis cache, the session is read from Redis (``cached_db``: Redis first,
# the database when the key is not there; every write goes to both, so a restart of Redis logs
# nobody out) and the session lookup leaves every request's database work — the labeling key press
# included. Without one, the database: a per-process cache (locmem) would keep serving a session
# that a logout in another process deleted.
SESSION_ENGINE = (
    "django.contrib.sessions.backends.cached_db"
    if CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    else "django.contrib.sessions.backends.db"
)

# --- API and logins (accounts/) ---------------------------------------------------------------
# A token works this many hours after it was issued, while its account is active and its
# password unchanged.
BIASLAB_API_TOKEN_HOURS = env_int("BIASLAB_API_TOKEN_HOURS", 24)
# This many failed logins for one username from one address within the minutes lock that pair
# out until the oldest of them is that old (login page and token API together; 0 = off).
BIASLAB_LOGIN_LOCKOUT_ATTEMPTS = env_int("BIASLAB_LOGIN_LOCKOUT_ATTEMPTS", 5)
BIASLAB_LOGIN_LOCKOUT_MINUTES = env_int("BIASLAB_LOGIN_LOCKOUT_MINUTES", 15)
# The address people open BiasLab at: `add_annotators` prints each new account's link to set its
# password under it (the study page's form uses the address the researcher is on).
BIASLAB_BASE_URL = env_str("BIASLAB_BASE_URL", "http://127.0.0.1:8000")

REST_FRAMEWORK = {
    # Token first: DRF answers an unauthenticated request with the first class's challenge, so
    # a caller without credentials gets 401 and "WWW-Authenticate: Token" (RFC 9110), not 403.
    # A session still logs in (the token class passes when there is no Authorization header).
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
        # An annotator labelling through the API makes about two requests per image.
        "user": env_rate("BIASLAB_API_THROTTLE_USER", "600/minute"),
        # Password checks per client address, POST /api/token/ and the login page together.
        "login": env_rate("BIASLAB_API_THROTTLE_LOGIN", "10/minute"),
        # New participant accounts made through join links, per client address.
        "join": env_rate("BIASLAB_JOIN_THROTTLE", "60/hour"),
    },
    # Proxies in front of the app whose X-Forwarded-For entries are trusted to name the client;
    # 0 = use REMOTE_ADDR (a client could write any X-Forwarded-For it likes).
    "NUM_PROXIES": env_int("BIASLAB_NUM_PROXIES", 0),
}

# --- API schema, error shape and strict input (see config/api.py) -----------------
INSTALLED_APPS += ["drf_spectacular", "drf_spectacular_sidecar"]
# First, so that it sees every /api/ answer last: JSON for the errors Django answers itself, and
# 405 for a method an API view lacks before the view authenticates anyone.
MIDDLEWARE = ["config.api.ApiErrorMiddleware", *MIDDLEWARE]
REST_FRAMEWORK |= {
    "DEFAULT_SCHEMA_CLASS": "config.api.ApiSchema",
    "EXCEPTION_HANDLER": "config.api.exception_handler",
    # JSON within the bounds of stored JSON (a body 5,000 levels deep is a 400, not a 500).
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
    # The schema and its pages are for logged-in users (session or token), as before.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "COMPONENT_SPLIT_REQUEST": True,
    "PATH_CONVERTER_OVERRIDES": {
        "id": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 2**63 - 1}
    },
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Enum components as drf-spectacular makes them, then the links between operations.
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
# --- end of the API schema block ---

# --- Image import -------------------------------------------------------------------------
# Formats Pillow may open for imported images; anything else is rejected by name.
BIASLAB_IMAGE_FORMATS = env_list("BIASLAB_IMAGE_FORMATS", ["PNG", "JPEG", "WEBP"])
# Decompression-bomb guard: images above this many pixels are rejected, never decoded.
BIASLAB_MAX_IMAGE_PIXELS = env_int("BIASLAB_MAX_IMAGE_PIXELS", 40_000_000)
# Per image file, and per uploaded zip (packed and unpacked).
BIASLAB_MAX_IMAGE_BYTES = env_int("BIASLAB_MAX_IMAGE_BYTES", 256 * 1024**2)
BIASLAB_MAX_UPLOAD_BYTES = env_int("BIASLAB_MAX_UPLOAD_BYTES", 2 * 1024**3)
# Worker processes that read, verify and store the files of a big image import (Linux; 0 or 1:
# threads only): one per CPU, at most 8 by default (a batch of 2,000 rows is 32 tasks of 64).
BIASLAB_IMPORT_PROCESSES = env_int("BIASLAB_IMPORT_PROCESSES", min(8, os.cpu_count() or 1))
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2
FILE_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2

# --- Labeling -----------------------------------------------------------------------------
# Default seconds an item of a new study stays reserved for an annotator who opened it but did
# not label it (studies.services.study_create; each study keeps its own value).
BIASLAB_CLAIM_TIMEOUT_SECONDS = env_int("BIASLAB_CLAIM_TIMEOUT_SECONDS", 15 * 60)
# Imports stream their CSV in batches (studies/batching.py): rows per batch, and bound values per
# SQL statement (999 is safe on every SQLite build; PostgreSQL takes far more).
BIASLAB_IMPORT_BATCH_ROWS = env_int("BIASLAB_IMPORT_BATCH_ROWS", 2000)
BIASLAB_SQL_MAX_VARIABLES = env_int("BIASLAB_SQL_MAX_VARIABLES", 999)
# --- Few-label estimates ---------------------------------------------------------------------
# Seconds after which a running estimate job whose worker stopped beating is queued again
# (estimates.services; the worker beats four times in that span).
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
    # Django's own default gives "django" a console handler of its own in development, and its
    # records also reach the root's: every 403 printed twice. One handler, the root's.
    "loggers": {"django": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}},
}
