"""The web process's entry point (gunicorn, and runserver through WSGI_APPLICATION).

It refuses to start on the built-in development SECRET_KEY unless DEBUG is on:
sessions, CSRF tokens and password resets are signed with it.
"""

import os

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.wsgi import get_wsgi_application

from nexopoll.hardening import make_undumpable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nexopoll.settings")
make_undumpable()  # plugins and other same-uid processes cannot read our environment

MIN_SECRET_KEY_CHARS = 32


def require_secret_key() -> None:
    """Raise ImproperlyConfigured unless a real SECRET_KEY is set (or DEBUG is on)."""
    if settings.DEBUG:
        return
    key = settings.SECRET_KEY
    if key == settings.DEV_SECRET_KEY or len(key) < MIN_SECRET_KEY_CHARS:
        raise ImproperlyConfigured(
            "the web process refuses to start without a real secret key: set DJANGO_SECRET_KEY "
            f"(or DJANGO_SECRET_KEY_FILE) to a random value of at least {MIN_SECRET_KEY_CHARS} "
            "characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))' "
            "(the built-in development key is allowed only with DJANGO_DEBUG=1)"
        )


application = get_wsgi_application()
require_secret_key()
