"""Writes for Picnic actions. Every status change goes through `action_transition`."""

from __future__ import annotations

import enum
import logging
import uuid
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from actions.bundler import BundlerClient, BundlerError, BundlerUnavailable
from actions.models import (
    ACTION_LIFECYCLE,
    PENDING_ON_CHAIN,
    Action,
    ActionStatus,
    ActionType,
)
from actions.selectors import actions_pending_on_chain, retention_cutoff
from actions.userops import entry_point_address, to_rpc, user_op_hash
from picnic.lifecycle import Actor, IllegalTransition, record_history, transition

logger = logging.getLogger(__name__)


class ReconcileOutcome(enum.StrEnum):
    NOT_PENDING = "not_pending"
    PENDING = "pending"  # bundler has no receipt yet
    UNAVAILABLE = "unavailable"  # bundler down, slow or answering garbage
    EXECUTED = "executed"
    FAILED = "failed"
    RACED = "raced"  # another reconciler got there first


def action_transition(
    *,
    action_id,
    to: str,
    actor: Actor,
    detail: str | None = None,
    payload: Any = None,
    updates: dict[str, Any] | None = None,
    only_from: set[str] | None = None,
) -> Action:
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        model=Action,
        pk=action_id,
        to=to,
        actor=actor,
        detail=detail,
        payload=payload,
        updates=updates,
        only_from=only_from,
    )


@transaction.atomic
def action_create(
    *,
    user,
    application,
    type: ActionType | str,
    summary: str,
    chain_id: int,
    smart_account: str,
    params: dict[str, Any],
    user_op: dict[str, Any] | None = None,
    entry_point_version: str | None = None,
    ttl_seconds: int | None = None,
    actor: Actor | None = None,
    action_id: uuid.UUID | None = None,
) -> Action:
    """A `proposed` action; for 4337 actions the userOpHash is computed now (SPEC)."""
    now = timezone.now()
    version = entry_point_version or settings.ENTRY_POINT_VERSION
    entry_point = ""
    op_hash = None
    if user_op is not None:
        entry_point = entry_point_address(version)
        op_hash = user_op_hash(user_op, entry_point=entry_point, chain_id=chain_id, version=version)
    action = Action.objects.create(
        id=action_id or uuid.uuid4(),
        user=user,
        application=application,
        type=type,
        status=ActionStatus.PROPOSED,
        summary=summary,
        chain_id=chain_id,
        smart_account=smart_account,
        params=params,
        user_op=user_op,
        entry_point=entry_point,
        entry_point_version=version if user_op is not None else "",
        user_op_hash=op_hash,
        created_at=now,
        updated_at=now,
        expires_at=now + timedelta(seconds=ttl_seconds or settings.ACTION_TTL_SECONDS),
    )
    record_history(
        lifecycle=ACTION_LIFECYCLE,
        instance=action,
        from_status=None,
        status=ActionStatus.PROPOSED,
        actor=actor or Actor.agent(),
        detail="proposed by the action tool",
        timestamp=now,
    )
    return action


def action_expire_if_overdue(*, action: Action, now: datetime | None = None) -> Action:
    """Expire a `proposed` action past its TTL, so nobody ever reads a stale `proposed`."""
    now = now or timezone.now()
    if action.status != ActionStatus.PROPOSED or action.expires_at > now:
        return action
    try:
        return action_transition(
            action_id=action.pk,
            to=ActionStatus.EXPIRED,
            actor=Actor.system(),
            detail="TTL passed before the user signed",
            only_from={ActionStatus.PROPOSED},
        )
    except IllegalTransition:
        # Signed or rejected a moment ago: that status wins.
        action.refresh_from_db()
        return action


def actions_expire_overdue(*, now: datetime | None = None, limit: int = 500) -> int:
    now = now or timezone.now()
    overdue = Action.objects.filter(status=ActionStatus.PROPOSED, expires_at__lte=now)
    expired = 0
    for action in overdue.order_by("expires_at")[:limit]:
        if action_expire_if_overdue(action=action, now=now).status == ActionStatus.EXPIRED:
            expired += 1
    return expired


def action_reconcile(
    *, action_id, actor: Actor, client: BundlerClient | None = None, note: str = ""
) -> ReconcileOutcome:
    """Ask the bundler for the userOp receipt and advance a submitted/broadcast action.

    Best-effort and never raises for a bundler problem. Not one transaction on purpose: no
    database transaction may stay open across the network call.
    """
    action = Action.objects.get(pk=action_id)
    if action.status == ActionStatus.SUBMITTED and action.user_op is None:
        return card_action_reconcile(action=action)
    if action.status not in PENDING_ON_CHAIN or not action.user_op_hash:
        return ReconcileOutcome.NOT_PENDING
    client = client or BundlerClient()
    now = timezone.now()
    try:
        receipt = client.get_user_operation_receipt(action.user_op_hash)
    except BundlerError as exc:
        logger.warning("reconcile %s: bundler unavailable: %s", action.pk, exc)
        Action.objects.filter(pk=action.pk).update(
            last_reconciled_at=now, last_reconcile_error=str(exc)[:2000]
        )
        return ReconcileOutcome.UNAVAILABLE
    Action.objects.filter(pk=action.pk).update(last_reconciled_at=now, last_reconcile_error="")
    if receipt is None:
        return ReconcileOutcome.PENDING

    prefix = f"{note}: " if note else ""
    updates: dict[str, Any] = {"tx_hash": receipt.tx_hash, "block_number": receipt.block_number}
    if receipt.success:
        updates["error"] = None  # a submission error that turned out harmless
        to = ActionStatus.EXECUTED
        detail = f"{prefix}included in block {receipt.block_number}, tx {receipt.tx_hash}"
    else:
        to = ActionStatus.FAILED
        updates["error"] = receipt.reason
        detail = f"{prefix}{receipt.reason}"
    try:
        action_transition(
            action_id=action.pk,
            to=to,
            actor=actor,
            detail=detail,
            payload=receipt.raw,
            updates=updates,
            only_from=set(PENDING_ON_CHAIN),
        )
    except IllegalTransition:
        return ReconcileOutcome.RACED
    return ReconcileOutcome(to.value)


def actions_reconcile_pending(
    *, batch_size: int | None = None, client: BundlerClient | None = None
) -> Counter:
    """One batch of submitted/broadcast actions, least recently reconciled first."""
    client = client or BundlerClient()
    outcomes: Counter = Counter()
    ids = list(
        actions_pending_on_chain(
            limit=batch_size or settings.ACTIONS_RECONCILE_BATCH_SIZE
        ).values_list("pk", flat=True)
    )
    for pk in ids:
        outcomes[action_reconcile(action_id=pk, actor=Actor.worker(), client=client)] += 1
    return outcomes


def action_submit(*, action_id, client: BundlerClient | None = None) -> Action:
    """signed → submitted → eth_sendUserOperation → broadcast.

    A bundler error leaves the action `submitted` with the error recorded (SPEC): the op may
    or may not have reached the mempool, and reconciliation settles it. Not one transaction:
    `submitted` must be committed before the network call so a crash mid-call is visible.
    """
    if Action.objects.filter(pk=action_id, user_op__isnull=True).exists():
        return card_action_submit(action_id=action_id)
    action = action_transition(
        action_id=action_id,
        to=ActionStatus.SUBMITTED,
        actor=Actor.worker(),
        detail="delivering the user operation to the bundler",
        only_from={ActionStatus.SIGNED},
    )
    client = client or BundlerClient()
    try:
        returned = client.send_user_operation(to_rpc(action.user_op), action.entry_point)
    except BundlerError as exc:
        kind = "bundler unreachable" if isinstance(exc, BundlerUnavailable) else "bundler rejected"
        code = f" ({exc.code})" if exc.code is not None else ""
        message = f"{kind}{code}: {exc}"
        Action.objects.filter(pk=action.pk).update(error=message[:2000])
        logger.warning("submit %s: %s", action.pk, message)
        action.refresh_from_db()
        return action
    if returned != action.user_op_hash:
        message = f"bundler returned userOpHash {returned}, expected {action.user_op_hash}"
        Action.objects.filter(pk=action.pk).update(error=message)
        action.refresh_from_db()
        return action
    return action_transition(
        action_id=action.pk,
        to=ActionStatus.BROADCAST,
        actor=Actor.worker(),
        detail=f"bundler accepted the user operation {returned}",
        only_from={ActionStatus.SUBMITTED},
    )


def _gnosis_pay(timeout: float | None = None):
    from actions.providers.gnosis_pay import GnosisPayClient

    return GnosisPayClient(
        settings.GNOSIS_PAY_URL, timeout=timeout or settings.GNOSIS_PAY_TIMEOUT_SECONDS
    )


def _card_token_key(action_id) -> str:
    return f"gnosis-pay-jwt:{action_id}"


def card_action_submit(*, action_id) -> Action:
    """signed → submitted → SIWE sign-in (EIP-1271 on the Safe) → freeze/unfreeze → executed.

    Gnosis Pay down or slow: the action stays `submitted` with the error; reconciliation checks
    the card's status later with the same short-lived token (freezing is idempotent)."""
    from actions.providers.gnosis_pay import Conflict, GnosisPayError, Unavailable

    action = action_transition(
        action_id=action_id,
        to=ActionStatus.SUBMITTED,
        actor=Actor.worker(),
        detail="signing in to Gnosis Pay with the signed SIWE message",
        only_from={ActionStatus.SIGNED},
    )
    client = _gnosis_pay()
    try:
        token = client.challenge(
            message=action.params["siwe_message"], signature=action.params["siwe_signature"]
        )
    except Unavailable as exc:
        return _card_error(action, f"{exc}")
    except GnosisPayError as exc:
        return _card_failed(action, f"Gnosis Pay refused the sign-in: {exc}", exc)
    cache.set(_card_token_key(action.pk), token, 50 * 60)
    try:
        client.set_frozen(
            card_id=action.params["card_id"], frozen=action.params["frozen"], token=token
        )
    except Conflict:
        pass  # already in the requested state: the status below decides
    except Unavailable as exc:
        return _card_error(action, str(exc))
    except GnosisPayError as exc:
        return _card_failed(action, str(exc), exc)
    return _card_settle(action, client, token)


def _card_failed(action: Action, message: str, exc) -> Action:
    return action_transition(
        action_id=action.pk,
        to=ActionStatus.FAILED,
        actor=Actor.worker(),
        only_from={ActionStatus.SUBMITTED},
        updates={"error": message},
        detail=str(exc),
        payload=exc.payload,
    )


def _card_error(action: Action, message: str) -> Action:
    Action.objects.filter(pk=action.pk).update(error=message[:2000])
    action.refresh_from_db()
    return action


def _card_settle(action: Action, client, token: str) -> Action:
    from actions.providers.gnosis_pay import GnosisPayError

    try:
        status = client.status(card_id=action.params["card_id"], token=token)
    except GnosisPayError as exc:
        return _card_error(action, str(exc))
    if status.is_frozen != action.params["frozen"]:
        return _card_error(
            action, f"card status says isFrozen={status.is_frozen} after the request"
        )
    return action_transition(
        action_id=action.pk,
        to=ActionStatus.EXECUTED,
        actor=Actor.worker(),
        only_from={ActionStatus.SUBMITTED},
        updates={"error": None},
        payload=status.raw,
        detail=f"card •••• {action.params['last4']} is now {'frozen' if status.is_frozen else 'active'}",
    )


def card_action_reconcile(*, action: Action) -> ReconcileOutcome:
    from actions.providers.gnosis_pay import Conflict, GnosisPayError

    token = cache.get(_card_token_key(action.pk))
    if token is None:
        return ReconcileOutcome.UNAVAILABLE  # needs a new signature: staff decide
    # Same bound as the bundler: this runs inside get_action_status too.
    client = _gnosis_pay(timeout=settings.BUNDLER_TIMEOUT_SECONDS)
    try:
        client.set_frozen(
            card_id=action.params["card_id"], frozen=action.params["frozen"], token=token
        )
    except Conflict:
        pass
    except GnosisPayError as exc:
        _card_error(action, str(exc))
        return ReconcileOutcome.UNAVAILABLE
    settled = _card_settle(action, client, token)
    return (
        ReconcileOutcome.EXECUTED
        if settled.status == ActionStatus.EXECUTED
        else ReconcileOutcome.PENDING
    )


def action_status_refresh(*, action: Action, client: BundlerClient | None = None) -> Action:
    """The side effect of get_action_status: expire if overdue, reconcile if on chain."""
    action = action_expire_if_overdue(action=action)
    if action.status in PENDING_ON_CHAIN:
        action_reconcile(
            action_id=action.pk, actor=Actor.agent(), client=client, note="get_action_status"
        )
    return action


@transaction.atomic
def actions_purge_retained(*, now: datetime | None = None) -> int:
    """Delete terminal actions past the retention window (24 h by default).

    Non-terminal ones stay for support staff: stuck work is never silently dropped.
    """
    deleted, _ = Action.objects.filter(
        created_at__lt=retention_cutoff(now), status__in=ACTION_LIFECYCLE.terminal
    ).delete()
    return deleted
