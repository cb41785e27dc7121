from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from . import metrics, views

# /demo/items (the feed config/pollers.yaml's demo jobs poll) only with NEXOPOLL_DEMO on
demo = [path("demo/items", views.demo_items)] if settings.NEXOPOLL_DEMO else []

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", views.healthz),
    *demo,
    path("metrics", metrics.metrics_view),
    path("", include("nexopoll.api.urls")),
]
