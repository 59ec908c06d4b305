from django.apps import AppConfig

from core.agents import agent_disconnected, agents_listed, user_deactivated


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Picnic actions"

    def ready(self) -> None:
        # In ready(): these modules import the models, which exist only once apps are loaded.
        from actions import health
        from actions.accounts.public import connect_login_receiver
        from actions.action_types import KINDS
        from actions.execution.public import kinds_register
        from actions.execution.public import on_agent_disconnected as withdraw_proposals
        from actions.permissions.public import (
            on_agent_disconnected,
            on_agents_listed,
            on_user_deactivated,
        )

        health.register()
        kinds_register(KINDS)
        connect_login_receiver()
        agent_disconnected.connect(
            on_agent_disconnected, dispatch_uid="spend-permissions-disconnect"
        )
        agent_disconnected.connect(
            withdraw_proposals, dispatch_uid="proposals-withdrawn-on-disconnect"
        )
        agents_listed.connect(on_agents_listed, dispatch_uid="spend-permissions-agents-listed")
        user_deactivated.connect(on_user_deactivated, dispatch_uid="spend-permissions-deactivated")
