from django.apps import AppConfig

from core.agents import agent_disconnected, agents_listed, user_deactivated


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Picnic actions"

    def ready(self) -> None:
        # In ready(): these modules import the models, which exist only once apps are loaded.
        from actions import health
        from actions.accounts import preferences
        from actions.execution import signing
        from actions.permissions import receivers

        health.register()
        preferences.connect_login_receiver()
        agent_disconnected.connect(
            receivers.on_agent_disconnected, dispatch_uid="spend-permissions-disconnect"
        )
        agent_disconnected.connect(
            signing.on_agent_disconnected, dispatch_uid="proposals-withdrawn-on-disconnect"
        )
        agents_listed.connect(
            receivers.on_agents_listed, dispatch_uid="spend-permissions-agents-listed"
        )
        user_deactivated.connect(
            receivers.on_user_deactivated, dispatch_uid="spend-permissions-deactivated"
        )
