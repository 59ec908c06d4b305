"""The receivers of the core's agent signals (connected in ActionsConfig.ready())."""

from __future__ import annotations

from django.utils import timezone

from actions.permissions.follow import P
from actions.permissions.grants import recipients_text
from actions.permissions.models import SpendPermission
from actions.permissions.revoking import (
    revoke_sign_path,
    spend_permissions_agent_disconnected,
    spend_permissions_user_deactivated,
)
from core.lifecycle import Actor


def on_agent_disconnected(sender, *, user, application_id, **kwargs) -> str | None:
    """Receiver of core.agents.agent_disconnected: the agent's keys destroyed at once, its
    grants revoked on chain (the page to sign the revocation is where the user goes next)."""
    actions = spend_permissions_agent_disconnected(user=user, application_id=application_id)
    return revoke_sign_path(actions[0]) if actions else None


def on_agents_listed(sender, *, user, **kwargs) -> dict[int, list[dict]]:
    """Receiver of core.agents.agents_listed: each agent's active spending permissions, what
    it may move with no prompt (the Connected agents page says so next to the agent)."""
    found: dict[int, list[dict]] = {}
    active = (
        SpendPermission.objects.select_related("token", "to_token", "application")
        .filter(user=user, status=P.ACTIVE, expires_at__gt=timezone.now())
        .order_by("created_at")
    )
    for permission in active:
        found.setdefault(permission.application_id, []).append(
            {
                "id": str(permission.pk),
                "name": permission.name,
                "amount": permission.allowance,
                "symbol": permission.token.symbol,
                "period": permission.period,
                "to": "" if permission.any_recipient else recipients_text(permission.recipients),
                "swap_only": not permission.recipients and not permission.any_recipient,
                "to_symbol": permission.to_token.symbol if permission.to_token_id else "",
                "expires_at": permission.expires_at,
            }
        )
    return found


def on_user_deactivated(sender, *, user, actor: Actor, why: str, **kwargs) -> None:
    """Receiver of core.agents.user_deactivated."""
    spend_permissions_user_deactivated(user=user, actor=actor, why=why)
