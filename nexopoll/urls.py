from django.contrib import admin
from django.urls import include, path

from . import metrics, views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", views.healthz),
    path("demo/items", views.demo_items),
    path("metrics", metrics.metrics_view),
    path("", include("nexopoll.api.urls")),
]
