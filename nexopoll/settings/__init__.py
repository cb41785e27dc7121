"""Django settings (``DJANGO_SETTINGS_MODULE=nexopoll.settings``). The only modules that
read the environment (through ``nexopoll/env.py``), in three parts: ``base`` (Django's
own: paths, apps, the database, static files, logging, email), ``tunables`` (nexopoll's
``NEXOPOLL_*``) and ``broker`` (Celery: Redis or Sentinel, the broker, queues, beat).
Each part imports what it needs from an earlier part by full name; this package gathers
their names for Django.
"""

from nexopoll.settings.base import *
from nexopoll.settings.broker import *
from nexopoll.settings.tunables import *
