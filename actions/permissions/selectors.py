"""Reads of spending permissions: the payload the tools and pages show, an agent's and a
user's permissions."""

from __future__ import annotations

from actions.execution.models import ActionType
from actions.permissions.follow import P, spend_permission_follow
from actions.permissions.models import SpendPermission
from actions.permissions.spending import remaining
from core.formats import decimal_string, rfc3339


def permission_payload(permission: SpendPermission, *, with_remaining: bool = True) -> dict:
    left = remaining(permission) if with_remaining and permission.status == P.ACTIVE else None
    spends = permission.actions.filter(type__in=(ActionType.TRANSFER, ActionType.SWAP)).order_by(
        "-created_at"
    )[:50]
    return {
        "permission_id": str(permission.pk),
        "name": permission.name,
        "purpose": permission.purpose,
        "status": permission.status,
        "chain_id": permission.chain_id,
        "asset_id": permission.token.asset_id,
        "symbol": permission.token.symbol,
        "allowance": permission.allowance,
        "period": permission.period,
        "recipients": [
            {"address": r["address"], "name": r.get("name") or None} for r in permission.recipients
        ],
        "any_recipient": permission.any_recipient,
        "to_asset_id": permission.to_token.asset_id if permission.to_token_id else None,
        "to_symbol": permission.to_token.symbol if permission.to_token_id else None,
        "starts_at": rfc3339(permission.starts_at),
        "expires_at": rfc3339(permission.expires_at),
        "remaining": decimal_string(left.units, permission.token.decimals)
        if left and left.units is not None
        else None,
        "period_ends_at": rfc3339(left.period_ends_at) if left and left.period_ends_at else None,
        "remaining_error": (left.error or None) if left else None,
        "spends": [
            {
                "action_id": str(a.pk),
                "type": a.type,
                "amount": a.params.get("amount", ""),
                # A swap's output comes back to the account: its token stands where a
                # transfer's recipient does.
                "to": a.params.get("to_asset_id", "")
                if a.type == ActionType.SWAP
                else a.params.get("to", ""),
                "status": a.status,
                "created_at": rfc3339(a.created_at),
            }
            for a in spends
        ],
    }


def spend_permissions_for_agent(*, user, application) -> list[dict]:
    """get_spend_permissions: the calling agent's own permissions only."""
    permissions = SpendPermission.objects.select_related(
        "token", "to_token", "account", "application"
    ).filter(user=user, application=application)
    return [permission_payload(spend_permission_follow(p)) for p in permissions[:50]]


def spend_permissions_for_user(*, user) -> list[SpendPermission]:
    return list(
        SpendPermission.objects.select_related("token", "to_token", "account", "application")
        .filter(user=user)
        .order_by("-created_at")[:100]
    )
