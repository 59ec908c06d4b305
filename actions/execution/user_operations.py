"""ERC-4337 user operations: delivery to the bundler, re-sends of the same signed op, receipts,
and ops that were dropped (their nonce used by another op)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from actions.evm_clients import bundler_client, chain_rpc
from actions.execution.models import (
    ACTION_LIFECYCLE,
    IN_FLIGHT,
    PENDING_ON_CHAIN,
    Action,
    ActionStatus,
    ActionType,
)
from actions.execution.transitions import ReconcileOutcome, action_touch, outcome_of
from actions.permissions.models import SpendPermission
from core.lifecycle import Actor, IllegalTransition, transition
from evm.bundler import (
    BundlerClient,
    BundlerError,
    BundlerUnavailable,
    SendVerdict,
    UserOpReceipt,
    classify_send_error,
    entry_point_nonce,
)
from evm.userops import to_rpc

logger = logging.getLogger(__name__)


def user_op_submit(*, action_id, client: BundlerClient | None = None) -> Action:
    """signed → submitted → eth_sendUserOperation → broadcast (or failed, if refused for good).

    A transient bundler error leaves the action `submitted` with the error recorded (SPEC);
    reconciliation sends the same signed op again with backoff. Not one transaction:
    `submitted` is committed before the network call so a crash mid-call is visible.
    """
    with transaction.atomic():
        gone = _signing_key_gone(action_id)
        if gone:
            return transition(
                lifecycle=ACTION_LIFECYCLE,
                pk=action_id,
                to=ActionStatus.FAILED,
                actor=Actor.worker(),
                only_from={ActionStatus.SIGNED},
                updates={"error": gone},
                detail=gone,
            )
        action = transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action_id,
            to=ActionStatus.SUBMITTED,
            actor=Actor.worker(),
            detail="delivering the user operation to the bundler",
            only_from={ActionStatus.SIGNED},
        )
    return _user_op_send(action, client or bundler_client(action.chain_id), actor=Actor.worker())


def _signing_key_gone(action_id) -> str:
    """Why a spend its permission's session key signed must not be sent ("" if it may): the
    key was destroyed (a Revoke, a disconnection, the user's deactivation) before the spend
    left. The permission's row is locked until `submitted` commits, so a destruction either
    comes first and stops it, or comes after it was sent."""
    action = Action.objects.only("type", "params", "spend_permission_id").get(pk=action_id)
    if (
        action.type not in (ActionType.TRANSFER, ActionType.SWAP)
        or action.spend_permission_id is None
        or not action.params.get("spend_permission")
    ):
        return ""
    held = (
        SpendPermission.objects.select_for_update(no_key=True)
        .filter(pk=action.spend_permission_id)
        .values_list("session_key_encrypted", flat=True)
        .first()
    )
    if held:
        return ""
    return "not sent: the spending permission's session key was destroyed (revoked) before it left"


def user_op_reconcile(
    *,
    action: Action,
    actor: Actor,
    client: BundlerClient | None = None,
    note: str = "",
    force_resend: bool = False,
) -> ReconcileOutcome:
    """Receipt → executed/failed; known to the bundler → broadcast; unknown and its nonce
    used by another op → failed (dropped); unknown otherwise → the same signed op again."""
    try:
        client = client or bundler_client(action.chain_id)
        receipt = client.get_user_operation_receipt(action.user_op_hash)
        if receipt is None:
            # ERC-7769 returns pending ops too (Alto only included ones: its "Already known"
            # answer to the re-send below tells us instead).
            known = client.get_user_operation_by_hash(action.user_op_hash)
            if known is None:
                action, receipt = _user_op_unknown(
                    action, client, actor=actor, force_resend=force_resend
                )
            elif action.status == ActionStatus.SUBMITTED:
                action = _user_op_accepted(
                    action, actor=actor, detail="the bundler holds the user operation"
                )
    except BundlerError as exc:
        logger.warning("reconcile %s: %s", action.pk, exc)
        action_touch(action_id=action.pk, last_reconcile_error=str(exc)[:2000])
        return ReconcileOutcome.UNAVAILABLE
    if action.last_reconcile_error:  # as read: clearing what is already clear writes nothing
        action_touch(action_id=action.pk, last_reconcile_error="")
    if receipt is None:
        return outcome_of(action)
    return _settle_receipt(action, receipt, actor=actor, note=note)


def _settle_receipt(
    action: Action, receipt: UserOpReceipt, *, actor: Actor, note: str = ""
) -> ReconcileOutcome:
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
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=to,
            actor=actor,
            detail=detail,
            payload=receipt.raw,
            updates=updates,
            only_from=set(PENDING_ON_CHAIN),
            expected=action.status,  # as read for this reconciliation: no read before the UPDATE
        )
    except IllegalTransition:
        return ReconcileOutcome.RACED
    return ReconcileOutcome(to.value)


def _user_op_unknown(
    action: Action, client: BundlerClient, *, actor: Actor, force_resend: bool
) -> tuple[Action, UserOpReceipt | None]:
    """Not included and not held by the bundler (as far as it says)."""
    nonce = _int(action.user_op["nonce"])
    w3 = chain_rpc(action.chain_id, timeout=settings.BUNDLER_TIMEOUT_SECONDS)
    next_nonce = entry_point_nonce(
        rpc_url=w3.provider.endpoint_uri,
        timeout=settings.BUNDLER_TIMEOUT_SECONDS,
        entry_point=action.entry_point,
        sender=action.user_op["sender"],
        key=nonce >> 64,
        w3=w3,
    )
    if next_nonce > nonce:
        # Used, but not by our op — unless it was included between the two questions.
        receipt = client.get_user_operation_receipt(action.user_op_hash)
        if receipt is not None:
            return action, receipt
        message = "dropped: nonce used by another operation"
        return _action_fail(
            action,
            message,
            actor=actor,
            detail=f"{message} (EntryPoint nonce is now {next_nonce}, this op had {nonce})",
        ), None
    if force_resend or action.next_submit_at is None or action.next_submit_at <= timezone.now():
        action = _user_op_send(action, client, actor=actor)
    return action, None


def _int(value: Any) -> int:
    return value if isinstance(value, int) else int(str(value), 0)


def _resend_delay(attempts: int) -> timedelta:
    """10 s, 20 s, 40 s … between deliveries of the same op, at most ten minutes (defaults)."""
    seconds = settings.ACTIONS_RESEND_BACKOFF_SECONDS * 2 ** max(attempts - 1, 0)
    return timedelta(seconds=min(seconds, settings.ACTIONS_RESEND_BACKOFF_MAX_SECONDS))


def _send_error_message(exc: BundlerError) -> str:
    kind = "bundler unreachable" if isinstance(exc, BundlerUnavailable) else "bundler rejected"
    code = f" ({exc.code})" if exc.code is not None else ""
    return f"{kind}{code}: {exc}"[:2000]


def _user_op_send(action: Action, client: BundlerClient, *, actor: Actor) -> Action:
    """One delivery of the signed op: accepted (or already held) → broadcast; refused for
    good → failed; anything else stays where it is, with the error, until the next attempt."""
    attempts = action.submit_attempts + 1
    # Counted before the request leaves, so a crash mid-call still counts and backs off.
    Action.objects.filter(pk=action.pk).update(
        submit_attempts=attempts, next_submit_at=timezone.now() + _resend_delay(attempts)
    )
    try:
        returned = client.send_user_operation(to_rpc(action.user_op), action.entry_point)
    except BundlerError as exc:
        verdict = classify_send_error(exc)
        message = _send_error_message(exc)
        logger.warning("send %s (attempt %d): %s [%s]", action.pk, attempts, message, verdict)
        if verdict == SendVerdict.KNOWN:
            return _user_op_accepted(
                action, actor=actor, detail="the bundler already holds the user operation"
            )
        if verdict == SendVerdict.FINAL:
            if attempts > 1:
                # A re-send refused because the op itself was just included (AA25): the
                # receipt decides, not the refusal.
                receipt = client.get_user_operation_receipt(action.user_op_hash)
                if receipt is not None:
                    _settle_receipt(action, receipt, actor=actor)
                    return Action.objects.get(pk=action.pk)
            return _action_fail(
                action,
                message,
                actor=actor,
                payload={"code": exc.code, "message": str(exc), "data": exc.data},
            )
        action_touch(action_id=action.pk, error=message)
        return Action.objects.get(pk=action.pk)
    if returned != action.user_op_hash:
        # A bundler that hashes differently (another EntryPoint or chain): staff must look.
        message = f"bundler returned userOpHash {returned}, expected {action.user_op_hash}"
        action_touch(action_id=action.pk, error=message)
        return Action.objects.get(pk=action.pk)
    return _user_op_accepted(
        action, actor=actor, detail=f"bundler accepted the user operation {returned}"
    )


def _user_op_accepted(action: Action, *, actor: Actor, detail: str) -> Action:
    if action.status != ActionStatus.SUBMITTED:
        action_touch(action_id=action.pk, error=None)  # a re-send of a broadcast op
        return Action.objects.get(pk=action.pk)
    try:
        return transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.BROADCAST,
            actor=actor,
            detail=detail,
            updates={"error": None},
            only_from={ActionStatus.SUBMITTED},
        )
    except IllegalTransition:  # a reconciler settled it meanwhile
        return Action.objects.get(pk=action.pk)


def _action_fail(
    action: Action, message: str, *, actor: Actor, detail: str | None = None, payload: Any = None
) -> Action:
    try:
        return transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.FAILED,
            actor=actor,
            only_from=set(IN_FLIGHT),
            updates={"error": message},
            detail=detail or message,
            payload=payload,
        )
    except IllegalTransition:  # settled meanwhile: that status stands
        return Action.objects.get(pk=action.pk)


def user_op_signed_updates(*, action: Action, signature: str) -> dict:
    """The packed assertion is the op's signature: the passkey account checks it on chain."""
    return {"user_op": {**action.user_op, "signature": signature}}
