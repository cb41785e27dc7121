from django.apps import AppConfig


class AdminExtConfig(AppConfig):
    name = "admin_ext"
    verbose_name = "nexopoll admin"
