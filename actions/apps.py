from django.apps import AppConfig

from core.agents import agent_disconnected


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Picnic actions"

    def ready(self) -> None:
        # In ready(): these modules import the models, which exist only once apps are loaded.
        from actions import health
        from actions.services import preferences, spend_permissions

        health.register()
        preferences.connect_login_receiver()
        agent_disconnected.connect(
            spend_permissions.on_agent_disconnected, dispatch_uid="spend-permissions-disconnect"
        )
