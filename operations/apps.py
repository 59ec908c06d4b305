from django.apps import AppConfig

from core.metrics import register_database_gauges


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Generation operations"

    def ready(self) -> None:
        # In ready(): operations.metrics imports the models, which exist only once apps load.
        from operations.metrics import credits_held_families

        register_database_gauges(credits_held_families)
