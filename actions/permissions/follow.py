"""How a spending permission follows the actions that carry it (its grant, its revocation),
ends at its expiry, and loses its session key. No chain access here: the action kinds
(SpendPermissionOperation, below) call it after the submission and reconciliation they already do."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from actions.execution.models import Action, ActionStatus
from actions.execution.public import UserOperation
from actions.permissions.models import (
    SPEND_PERMISSION_LIFECYCLE,
    SpendPermission,
    SpendPermissionStatus,
)
from core.lifecycle import Actor, IllegalTransition, record_history, transition

P = SpendPermissionStatus


# --- following the grant and revoke actions --------------------------------------------------

_GRANT_FOLLOWS = {
    ActionStatus.SIGNED: P.GRANTING,
    ActionStatus.SUBMITTED: P.GRANTING,
    ActionStatus.BROADCAST: P.GRANTING,
    ActionStatus.EXECUTED: P.ACTIVE,
    ActionStatus.FAILED: P.FAILED,
    ActionStatus.EXPIRED: P.DECLINED,
    ActionStatus.REJECTED: P.DECLINED,
}


def _key_destroyed(values: dict) -> dict:
    return {**values, "session_key_encrypted": "", "key_destroyed_at": timezone.now()}


def spend_permission_follow(permission: SpendPermission) -> SpendPermission:
    """Move the permission as its grant or revoke action moved (idempotent)."""
    if permission.status in (P.REQUESTED, P.GRANTING) and permission.grant_action_id:
        action = Action.objects.get(pk=permission.grant_action_id)
        target = _GRANT_FOLLOWS.get(action.status)
        path = [target] if target else []
        if target == P.ACTIVE and permission.status == P.REQUESTED:
            path = [P.GRANTING, P.ACTIVE]
        for step in path:
            if step == permission.status:
                continue
            ends = step in (P.FAILED, P.DECLINED)
            detail = {
                P.GRANTING: "the user signed the grant",
                P.ACTIVE: f"granted on chain, tx {action.tx_hash}",
                P.FAILED: f"the grant failed: {action.error or 'no reason given'}",
                P.DECLINED: f"the grant was not signed ({action.status})",
            }[step]
            try:
                permission = transition(
                    lifecycle=SPEND_PERMISSION_LIFECYCLE,
                    pk=permission.pk,
                    to=step,
                    actor=Actor.worker(),
                    expected=permission.status,
                    updates=_key_destroyed({"error": action.error or ""}) if ends else None,
                    detail=detail,
                )
            except IllegalTransition:
                permission.refresh_from_db()
                break
    if permission.status == P.REVOKING and permission.revoke_action_id:
        action = Action.objects.get(pk=permission.revoke_action_id)
        if action.status == ActionStatus.EXECUTED:
            try:
                permission = transition(
                    lifecycle=SPEND_PERMISSION_LIFECYCLE,
                    pk=permission.pk,
                    to=P.REVOKED,
                    actor=Actor.worker(),
                    expected=P.REVOKING,
                    detail=f"revoked on chain, tx {action.tx_hash}",
                )
            except IllegalTransition:
                permission.refresh_from_db()
    return permission


def spend_permissions_follow_action(action: Action) -> None:
    """After a grant or revoke action moved: the permissions it carries follow."""
    for permission in SpendPermission.objects.filter(
        Q(grant_action=action) | Q(revoke_action=action)
    ):
        spend_permission_follow(permission)


def spend_permissions_sweep(*, now: datetime | None = None, limit: int = 500) -> int:
    """Beat: end permissions past their expiry (the key destroyed), and follow the actions
    of grants and revocations. Returns how many changed status."""
    now = now or timezone.now()
    changed = 0
    overdue = SpendPermission.objects.filter(
        status__in=(P.ACTIVE, P.REVOKING), expires_at__lte=now
    ).values_list("pk", "status")[:limit]
    for pk, status in overdue:
        try:
            transition(
                lifecycle=SPEND_PERMISSION_LIFECYCLE,
                pk=pk,
                to=P.EXPIRED,
                actor=Actor.system(),
                expected=status,
                updates=_key_destroyed({}),
                detail="expired: its end passed; the session key is destroyed",
            )
            changed += 1
        except IllegalTransition:
            continue
    following = SpendPermission.objects.filter(
        status__in=(P.REQUESTED, P.GRANTING, P.REVOKING)
    ).order_by("updated_at")[:limit]
    for permission in following:
        before = permission.status
        if spend_permission_follow(permission).status != before:
            changed += 1
    return changed


def spend_permission_destroy_key(*, permission: SpendPermission, actor: Actor, why: str) -> bool:
    """Empty the session key now (the server can sign nothing more under it), with a history
    row that keeps the status. True if there was a key."""
    emptied = (
        SpendPermission.objects.filter(pk=permission.pk)
        .exclude(session_key_encrypted="")
        .update(
            session_key_encrypted="", key_destroyed_at=timezone.now(), updated_at=timezone.now()
        )
    )
    if emptied:
        from_status = permission.status
        permission.refresh_from_db()
        record_history(
            lifecycle=SPEND_PERMISSION_LIFECYCLE,
            instance=permission,
            from_status=from_status,
            status=permission.status,
            actor=actor,
            detail=f"session key destroyed: {why}",
        )
    return bool(emptied)


class SpendPermissionOperation(UserOperation):
    """A user operation of the passkey account on itself that grants or revokes a spending
    permission: submitted and reconciled as any user operation, then the permission follows
    (above). It makes no line in the transaction history (no tokens move)."""

    signed_note = "Signed by the user; submitting the permission's user operation."

    def send(self, *, action_id, client=None):
        action = super().send(action_id=action_id, client=client)
        spend_permissions_follow_action(action)
        return action

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        outcome = super().reconcile(
            action, actor=actor, client=client, note=note, force_resend=force_resend
        )
        spend_permissions_follow_action(Action.objects.get(pk=action.pk))
        return outcome
