"""Django's own settings: paths, apps, the database, static files, logging, email.

Embedded defaults run everything on one machine: SQLite under ``data/``, Redis at
``REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Set ``DATABASE_URL`` for
PostgreSQL.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from nexopoll.core.extras import MissingExtra, require
from nexopoll.env import env_bool, env_float, env_int, env_secret, env_str

# NEXOPOLL_HOME holds data/, config/pollers.yaml and plugins/ (default: the current
# directory, the checkout under `make run`): an installed package writes nothing inside itself.
BASE_DIR = Path(env_str("NEXOPOLL_HOME", "") or ".").resolve()
DATA_DIR = Path(env_str("NEXOPOLL_DATA_DIR", str(BASE_DIR / "data")))
# The demo feed /demo/items that config/pollers.yaml's demo jobs poll (`make run` turns it on)
NEXOPOLL_DEMO = env_bool("NEXOPOLL_DEMO", False)

DEBUG = env_bool("DJANGO_DEBUG", False)
# The built-in key lets the CLI, the workers and the tests run without one; the web
# process (nexopoll/wsgi.py, so gunicorn and runserver) refuses it unless DEBUG is on.
# `make run` generates a key under data/ (DJANGO_SECRET_KEY_FILE).
DEV_SECRET_KEY = "nexopoll-insecure-dev-key-change-me"
SECRET_KEY = env_secret("DJANGO_SECRET_KEY", "") or DEV_SECRET_KEY
ALLOWED_HOSTS = [h for h in env_str("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]

INSTALLED_APPS = [
    "admin_ext.apps.NexopollAdminConfig",  # django.contrib.admin with the nexopoll site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_results",
    "nexopoll.apps.NexopollConfig",
    "admin_ext.apps.AdminExtConfig",
]

MIDDLEWARE = [
    # every answer under /api/ is JSON, errors raised anywhere below included
    "nexopoll.api.middleware.ApiJsonMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # static files (the admin's CSS) served by the web process itself, DEBUG on or off
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "nexopoll.urls"
WSGI_APPLICATION = "nexopoll.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


# A locked row or table fails a statement after this long instead of holding the
# worker (PostgreSQL lock_timeout, SQLite busy timeout); a statement is cancelled
# after NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS (PostgreSQL; 0 = no limit). The tick
# treats both as transient errors and retries.
NEXOPOLL_DB_LOCK_TIMEOUT_SECS = env_float("NEXOPOLL_DB_LOCK_TIMEOUT_SECS", 15.0)
NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS = env_float("NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS", 120.0)


def _database() -> dict:
    url = env_str("DATABASE_URL", "")
    if url:
        db = dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    else:
        with contextlib.suppress(OSError):  # a fresh NEXOPOLL_HOME: `nexopoll migrate` makes it
            DATA_DIR.mkdir(parents=True, exist_ok=True)
        db = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(DATA_DIR / "nexopoll.sqlite3"),
            "CONN_MAX_AGE": None,  # keep the connection: reopening costs more than a tick
        }
    # A connection that broke (PostgreSQL restarted, a backend killed) is found by a
    # health check before its next use and replaced (workers re-arm it before each task).
    db["CONN_HEALTH_CHECKS"] = True
    if db["ENGINE"].endswith(("postgresql", "postgis")):
        try:
            require("psycopg", "postgres", "a PostgreSQL DATABASE_URL")
        except MissingExtra as exc:
            raise ImproperlyConfigured(str(exc)) from None
        lock_ms = int(NEXOPOLL_DB_LOCK_TIMEOUT_SECS * 1000)
        stmt_ms = int(NEXOPOLL_DB_STATEMENT_TIMEOUT_SECS * 1000)
        options = db.setdefault("OPTIONS", {})
        options["options"] = (
            f"{options.get('options', '')} -c lock_timeout={lock_ms} -c statement_timeout={stmt_ms}"
        ).strip()
    if db["ENGINE"].endswith("sqlite3"):
        # IMMEDIATE takes the write lock at BEGIN, so a tick's commit never fails
        # half-way on a lock upgrade; WAL lets readers run beside the writer.
        db["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": NEXOPOLL_DB_LOCK_TIMEOUT_SECS,
            # FULL: a committed cursor (whose deliveries may already be sent) survives
            # a power loss; in WAL mode it costs one fsync per commit.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous="
            + env_str("NEXOPOLL_SQLITE_SYNCHRONOUS", "FULL")
            + ";",
        }
    return db


DATABASES = {"default": _database()}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # a file, not :memory:, so worker processes started by the tests share it
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test-nexopoll.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = str(DATA_DIR / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# `collectstatic` (make run does it) fills STATIC_ROOT; without it WhiteNoise still
# finds the files in the apps, so the admin is styled either way.
WHITENOISE_USE_FINDERS = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # the process's real stderr: under Celery, sys.stderr is a proxy that re-logs every
    # line as WARNING, so beat's and the worker's lines would come out twice-prefixed
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.__stderr__",
        }
    },
    "loggers": {
        "nexopoll": {
            "handlers": ["console"],
            "level": env_str("NEXOPOLL_LOG_LEVEL", "INFO"),
            "propagate": False,
        },
        # urllib3 logs each request line at DEBUG, and a Telegram request's path holds
        # the bot token: those lines never pass, whatever the root level
        "urllib3": {"level": "WARNING"},
    },
}

# The email channel's SMTP server (Django's mail settings, from the environment).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 30.0)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "nexopoll@localhost")
