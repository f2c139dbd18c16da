"""BiasLab settings. Everything configurable comes from the environment (see README)."""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from config.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("BIASLAB_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", default=True)
# Production mode (DEBUG off) must never run with a secret anyone can read in the repo.
SECRET_KEY = (
    env_str("DJANGO_SECRET_KEY", "insecure-local-development-key-change-me")
    if DEBUG
    else env_str("DJANGO_SECRET_KEY", required=True)
)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])

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
    "rest_framework.authtoken",
    "annotate",
    "detectors",
    "reports",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
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

# SQLite is the embedded default; DATABASE_URL=postgres://... switches to PostgreSQL.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'biaslab.sqlite3'}"),
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

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 100,
}

# --- Image import -------------------------------------------------------------------------
# Formats Pillow may open for imported images; anything else is rejected by name.
BIASLAB_IMAGE_FORMATS = env_list("BIASLAB_IMAGE_FORMATS", ["PNG", "JPEG", "WEBP"])
# Decompression-bomb guard: images above this many pixels are rejected, never decoded.
BIASLAB_MAX_IMAGE_PIXELS = env_int("BIASLAB_MAX_IMAGE_PIXELS", 40_000_000)
# Per image file, and per uploaded zip (packed and unpacked).
BIASLAB_MAX_IMAGE_BYTES = env_int("BIASLAB_MAX_IMAGE_BYTES", 256 * 1024**2)
BIASLAB_MAX_UPLOAD_BYTES = env_int("BIASLAB_MAX_UPLOAD_BYTES", 2 * 1024**3)
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2
FILE_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2

# --- Labeling -----------------------------------------------------------------------------
# Default seconds an image stays claimed by an annotator who opened it but did not label it.
BIASLAB_CLAIM_TIMEOUT_SECONDS = env_int("BIASLAB_CLAIM_TIMEOUT_SECONDS", 15 * 60)

# --- Detectors and generation (see detectors/registry.py) ----------------------------------
# Weights per detector come from BIASLAB_<NAME>_WEIGHTS (hub id or local folder); detectors
# read them through detectors.weights, never from here directly, so tests can override env.
BIASLAB_MODEL_CACHE = Path(env_str("BIASLAB_MODEL_CACHE", str(VAR_DIR / "models")))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("BIASLAB_LOG_LEVEL", "WARNING")},
}
