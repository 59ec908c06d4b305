from django.apps import AppConfig


class PicnicConfig(AppConfig):
    name = "picnic"
    verbose_name = "Picnic (shared lifecycle machinery)"
