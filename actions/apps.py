from django.apps import AppConfig

from core.agents import agent_disconnected, agents_listed, user_deactivated


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Picnic actions"

    def ready(self) -> None:
        # In ready(): these modules import the models, which exist only once apps are loaded.
        from actions import health
        from actions.services import preferences, signing, spend_permissions

        health.register()
        preferences.connect_login_receiver()
        agent_disconnected.connect(
            spend_permissions.on_agent_disconnected, dispatch_uid="spend-permissions-disconnect"
        )
        agent_disconnected.connect(
            signing.on_agent_disconnected, dispatch_uid="proposals-withdrawn-on-disconnect"
        )
        agents_listed.connect(
            spend_permissions.on_agents_listed, dispatch_uid="spend-permissions-agents-listed"
        )
        user_deactivated.connect(
            spend_permissions.on_user_deactivated, dispatch_uid="spend-permissions-deactivated"
        )
