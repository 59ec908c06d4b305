from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Picnic actions"

    def ready(self) -> None:
        # In ready(): these modules import the models, which exist only once apps are loaded.
        from actions import health
        from actions.services import preferences

        health.register()
        preferences.connect_login_receiver()
