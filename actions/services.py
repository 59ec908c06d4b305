"""Writes for Picnic actions. Every status change goes through `action_transition`."""

from __future__ import annotations

import enum
import logging
import uuid
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Lower
from django.utils import timezone

from actions.evm_clients import bundler_client
from actions.models import (
    ACTION_LIFECYCLE,
    IN_FLIGHT,
    PENDING_ON_CHAIN,
    Action,
    ActionStatus,
    ActionType,
    Card,
    CardPurchase,
    GnosisPaySession,
    HistoryEntry,
    HistoryKind,
    RampAccount,
    SmartAccount,
    Token,
    TokenTransfer,
)
from actions.selectors import (
    actions_pending_on_chain,
    gnosis_pay_session_token,
    retention_cutoff,
)
from evm.bundler import (
    BundlerClient,
    BundlerError,
    BundlerUnavailable,
    SendVerdict,
    UserOpReceipt,
    classify_send_error,
    entry_point_nonce,
)
from evm.userops import entry_point_address, to_rpc, user_op_hash
from picnic.formats import rfc3339
from picnic.lifecycle import Actor, IllegalTransition, record_history, touch, transition

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


def action_touch(*, action_id, **changes: Any) -> bool:
    """A change people see that is not a transition (an error): updated_at and an event."""
    return touch(lifecycle=ACTION_LIFECYCLE, model=Action, pk=action_id, changes=changes)


class ActionResolutionError(Exception):
    """Staff asked for something the action's state does not allow (shown to them as is)."""


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
    *,
    action_id,
    actor: Actor,
    client: BundlerClient | None = None,
    note: str = "",
    force_resend: bool = False,
) -> ReconcileOutcome:
    """Advance an in-flight action from what the outside world says.

    Best-effort and never raises for a provider problem. Not one transaction on purpose: no
    database transaction may stay open across the network call.
    """
    action = Action.objects.get(pk=action_id)
    now = timezone.now()
    if action.status not in IN_FLIGHT:
        return ReconcileOutcome.NOT_PENDING
    if action.status == ActionStatus.SIGNED:
        # The submit task runs on commit of the signature; only one that never ran (a worker
        # killed, a lost enqueue) is picked up here, after a grace period.
        grace = timedelta(seconds=settings.ACTIONS_SUBMIT_GRACE_SECONDS)
        if not force_resend and action.signed_at and action.signed_at > now - grace:
            return ReconcileOutcome.PENDING
    # Stamped first, whatever follows: batches take the least recently reconciled first, so an
    # action that cannot settle now never holds the head of the queue.
    Action.objects.filter(pk=action.pk).update(last_reconciled_at=now)
    if action.status == ActionStatus.SIGNED:
        try:
            action = action_submit(action_id=action.pk, client=client)
        except IllegalTransition:
            return ReconcileOutcome.RACED
        return _outcome(action)
    if action.type == ActionType.CARD_LIMIT_SET:
        return card_limit_reconcile(action=action, actor=actor)
    if action.user_op is None:
        return card_action_reconcile(action=action)
    return _user_op_reconcile(
        action, client or bundler_client(), actor=actor, note=note, force_resend=force_resend
    )


def _outcome(action: Action) -> ReconcileOutcome:
    return {
        ActionStatus.EXECUTED: ReconcileOutcome.EXECUTED,
        ActionStatus.FAILED: ReconcileOutcome.FAILED,
    }.get(action.status, ReconcileOutcome.PENDING)


def _user_op_reconcile(
    action: Action, client: BundlerClient, *, actor: Actor, note: str, force_resend: bool
) -> ReconcileOutcome:
    """Receipt → executed/failed; known to the bundler → broadcast; unknown and its nonce
    used by another op → failed (dropped); unknown otherwise → the same signed op again."""
    try:
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
    action_touch(action_id=action.pk, last_reconcile_error="")
    if receipt is None:
        return _outcome(action)
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


def _user_op_unknown(
    action: Action, client: BundlerClient, *, actor: Actor, force_resend: bool
) -> tuple[Action, UserOpReceipt | None]:
    """Not included and not held by the bundler (as far as it says)."""
    nonce = _int(action.user_op["nonce"])
    next_nonce = entry_point_nonce(
        rpc_url=settings.CHAIN_RPC_URL,
        timeout=settings.BUNDLER_TIMEOUT_SECONDS,
        entry_point=action.entry_point,
        sender=action.user_op["sender"],
        key=nonce >> 64,
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
        return action_transition(
            action_id=action.pk,
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
        return action_transition(
            action_id=action.pk,
            to=ActionStatus.FAILED,
            actor=actor,
            only_from=set(IN_FLIGHT),
            updates={"error": message},
            detail=detail or message,
            payload=payload,
        )
    except IllegalTransition:  # settled meanwhile: that status stands
        return Action.objects.get(pk=action.pk)


def actions_reconcile_pending(
    *, batch_size: int | None = None, client: BundlerClient | None = None
) -> Counter:
    """One batch of in-flight actions, least recently reconciled first."""
    client = client or bundler_client()
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
    """signed → submitted → eth_sendUserOperation → broadcast (or failed, if refused for good).

    A transient bundler error leaves the action `submitted` with the error recorded (SPEC);
    reconciliation sends the same signed op again with backoff. Not one transaction:
    `submitted` is committed before the network call so a crash mid-call is visible.
    """
    kind = Action.objects.filter(pk=action_id).values("type", "user_op").first()
    if kind and kind["type"] == ActionType.CARD_LIMIT_SET:
        return card_limit_submit(action_id=action_id)
    if kind and kind["user_op"] is None:
        return card_action_submit(action_id=action_id)
    action = action_transition(
        action_id=action_id,
        to=ActionStatus.SUBMITTED,
        actor=Actor.worker(),
        detail="delivering the user operation to the bundler",
        only_from={ActionStatus.SIGNED},
    )
    return _user_op_send(action, client or bundler_client(), actor=Actor.worker())


def action_mark_failed(*, action_id, staff_user, note: str) -> Action:
    """Staff end an in-flight action that cannot finish. The signed user operation stays valid
    until its nonce is used: the note should say why it will not be (or why that is fine)."""
    note = _required_note(note)
    action = Action.objects.get(pk=action_id)
    if action.status not in IN_FLIGHT:
        raise ActionResolutionError(
            f"Only in-flight actions can be marked failed; it is {action.status}"
        )
    message = f"marked failed by staff: {note}"
    try:
        return action_transition(
            action_id=action.pk,
            to=ActionStatus.FAILED,
            actor=Actor.staff(staff_user),
            only_from=set(IN_FLIGHT),
            updates={"error": message},
            detail=message,
        )
    except IllegalTransition as exc:
        raise ActionResolutionError(f"The action moved on meanwhile: it is {exc.current}") from None


def action_resend(*, action_id, staff_user, note: str) -> ReconcileOutcome:
    """Staff deliver an in-flight action again now: the same signed op to the bundler (after
    checking it is neither included nor held), the card request with the live session, or the
    submission a lost task never started. Recorded in the history with the staff user."""
    note = _required_note(note)
    action = Action.objects.get(pk=action_id)
    if action.status not in IN_FLIGHT:
        raise ActionResolutionError(f"Only in-flight actions can be re-sent; it is {action.status}")
    record_history(
        lifecycle=ACTION_LIFECYCLE,
        instance=action,
        from_status=action.status,
        status=action.status,
        actor=Actor.staff(staff_user),
        detail=f"re-send requested by staff: {note}",
    )
    return action_reconcile(
        action_id=action.pk,
        actor=Actor.staff(staff_user),
        note="re-sent by staff",
        force_resend=True,
    )


def _required_note(note: str) -> str:
    note = (note or "").strip()
    if not note:
        raise ActionResolutionError("A note is required: say why, for the audit trail")
    return note[:1000]


def _gnosis_pay(timeout: float | None = None):
    from actions.providers.gnosis_pay import GnosisPayClient

    return GnosisPayClient(
        settings.GNOSIS_PAY_URL, timeout=timeout or settings.GNOSIS_PAY_TIMEOUT_SECONDS
    )


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
    # In the database: reconciliation (any process) and the purchase history use it too.
    gnosis_pay_session_store(safe_address=action.smart_account, token=token)
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


def gnosis_pay_session_store(
    *, safe_address: str, token: str, now: datetime | None = None
) -> GnosisPaySession:
    """Keep a sign-in's JWT for the Safe until it expires (its `exp`, else 50 minutes)."""
    from actions.providers.gnosis_pay import jwt_expiry

    now = now or timezone.now()
    session, _ = GnosisPaySession.objects.update_or_create(
        safe_address=safe_address.lower(),
        defaults={
            "token": token,
            "expires_at": jwt_expiry(token) or now + timedelta(minutes=50),
            "created_at": now,
        },
    )
    return session


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
    action_touch(action_id=action.pk, error=message[:2000])
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

    token = gnosis_pay_session_token(safe_address=action.smart_account)
    if token is None:
        # The SIWE nonce was single use: only a new signature signs in again. Staff decide.
        action_touch(
            action_id=action.pk,
            last_reconcile_error="no live Gnosis Pay session for the card's Safe: a new signature is needed",
        )
        return ReconcileOutcome.UNAVAILABLE
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
        action_touch(action_id=action.pk, last_reconcile_error=str(exc)[:2000])
        return ReconcileOutcome.UNAVAILABLE
    action_touch(action_id=action.pk, last_reconcile_error="")
    settled = _card_settle(action, client, token)
    return (
        ReconcileOutcome.EXECUTED
        if settled.status == ActionStatus.EXECUTED
        else ReconcileOutcome.PENDING
    )


# --- card_limit: a scheduled transaction in the card Safe's Delay modifier ----------------


def _card_relayer(timeout: float | None = None):
    from actions.evm_clients import card_relayer

    return card_relayer(timeout=timeout)


def _set_params(action: Action, **changes: Any) -> Action:
    """Record relay bookkeeping (transaction hashes) before the transaction leaves."""
    params = {**action.params, **changes}
    Action.objects.filter(pk=action.pk).update(params=params, updated_at=timezone.now())
    action.params = params
    return action


def _limit_failed(action: Action, message: str, *, actor: Actor, payload: Any = None) -> Action:
    return action_transition(
        action_id=action.pk,
        to=ActionStatus.FAILED,
        actor=actor,
        only_from=set(PENDING_ON_CHAIN),
        updates={"error": message},
        detail=message,
        payload=payload,
    )


def _receipt_payload(receipt: dict) -> dict:
    return {
        "transactionHash": "0x" + bytes(receipt["transactionHash"]).hex(),
        "blockNumber": receipt["blockNumber"],
        "status": receipt["status"],
        "gasUsed": receipt["gasUsed"],
    }


def card_limit_submit(*, action_id) -> Action:
    """signed → submitted → relay `PasskeyAccount.execModuleTx` (the passkey-signed Zodiac
    module transaction that enqueues the limit change in the Delay) → broadcast.

    The relay transaction's hash is committed before it is sent; RPC trouble leaves the action
    `submitted` with the error, and reconciliation finds or re-sends that same transaction."""
    action = action_transition(
        action_id=action_id,
        to=ActionStatus.SUBMITTED,
        actor=Actor.worker(),
        detail="relaying the signed delay-module transaction",
        only_from={ActionStatus.SIGNED},
    )
    return _card_limit_relay(action, actor=Actor.worker(), wait=settings.GNOSIS_PAY_TIMEOUT_SECONDS)


def _card_limit_relay(action: Action, *, actor: Actor, wait: float) -> Action:
    from chain import zodiac
    from evm.relayer import RelayError, RelayRefused

    p = action.params
    relayer = _card_relayer(wait)
    call = zodiac.exec_module_tx_call(
        modifier=p["delay"],
        data=bytes.fromhex(p["module_data"][2:]),
        salt=bytes.fromhex(p["salt"][2:]),
        signature=bytes.fromhex(p["module_signature"][2:]),
    )
    try:
        prepared = relayer.prepare(to=p["owner"], data=call)
    except RelayRefused as exc:
        return _limit_failed(action, f"the delay module refused the change: {exc}", actor=actor)
    except RelayError as exc:
        return _card_error(action, str(exc))
    action = _set_params(action, relay_tx=prepared.hash, relay_raw=prepared.raw)
    return _card_limit_follow_relay(action, relayer, actor=actor, wait=wait)


def _card_limit_follow_relay(action: Action, relayer, *, actor: Actor, wait: float) -> Action:
    from chain import zodiac
    from evm.relayer import RelayError

    p = action.params
    try:
        receipt = relayer.receipt(p["relay_tx"])
        if receipt is None:
            if not relayer.known(p["relay_tx"]):
                relayer.send(p["relay_raw"])  # never left, or dropped: the same transaction
            receipt = relayer.receipt(p["relay_tx"], wait=wait)
    except RelayError as exc:
        return _card_error(action, str(exc))
    if receipt is None:
        return _card_error(action, f"relay transaction {p['relay_tx']} is not mined yet")
    if receipt["status"] != 1:
        return _limit_failed(
            action,
            f"the relay transaction {p['relay_tx']} reverted",
            actor=actor,
            payload=_receipt_payload(receipt),
        )
    added = [
        log
        for log in receipt["logs"]
        if log["topics"]
        and "0x" + bytes(log["topics"][0]).hex() == zodiac.TRANSACTION_ADDED
        and log["address"].lower() == p["delay"].lower()
    ]
    if len(added) != 1:
        return _limit_failed(
            action,
            "the relay transaction did not enqueue exactly one delay-module transaction",
            actor=actor,
            payload=_receipt_payload(receipt),
        )
    queue_nonce = int.from_bytes(bytes(added[0]["topics"][1]), "big")
    action = _set_params(action, queue_nonce=queue_nonce, enqueued_block=receipt["blockNumber"])
    return action_transition(
        action_id=action.pk,
        to=ActionStatus.BROADCAST,
        actor=actor,
        only_from={ActionStatus.SUBMITTED},
        updates={"error": None},
        detail=(
            f"queued in the delay module as transaction #{queue_nonce}; it runs after the "
            f"{settings.CARD_DELAY_COOLDOWN_SECONDS} s cooldown"
        ),
        payload=_receipt_payload(receipt),
    )


def card_limit_reconcile(*, action: Action, actor: Actor) -> ReconcileOutcome:
    """Follow the delay-module queue: enqueued → cooldown → dispatch (`executeNextTx`, by the
    relayer) → executed; `failed` when the scheduled transaction reverts or expires."""
    from evm.relayer import RelayError

    # Bounded like the bundler: this runs inside get_action_status too.
    relayer = _card_relayer(settings.BUNDLER_TIMEOUT_SECONDS)
    try:
        if action.status == ActionStatus.SUBMITTED:
            if "relay_tx" in action.params:
                action = _card_limit_follow_relay(
                    action, relayer, actor=actor, wait=settings.BUNDLER_TIMEOUT_SECONDS
                )
            else:  # the worker stopped before signing the relay transaction
                action = _card_limit_relay(
                    action, actor=actor, wait=settings.BUNDLER_TIMEOUT_SECONDS
                )
            if action.status == ActionStatus.SUBMITTED:
                return ReconcileOutcome.UNAVAILABLE
        if action.status == ActionStatus.BROADCAST:
            action = _card_limit_follow_queue(action, relayer, actor=actor)
    except RelayError as exc:
        _card_error(action, str(exc))
        action_touch(action_id=action.pk, last_reconcile_error=str(exc)[:2000])
        return ReconcileOutcome.UNAVAILABLE
    action_touch(action_id=action.pk, last_reconcile_error="")
    return _outcome(action)


def _card_limit_follow_queue(action: Action, relayer, *, actor: Actor) -> Action:
    from chain import zodiac
    from evm.relayer import RelayRefused

    p = action.params
    delay = relayer.w3.eth.contract(
        address=relayer.w3.to_checksum_address(p["delay"]), abi=zodiac.abi("Delay")
    )
    n = p["queue_nonce"]
    try:
        tx_nonce = delay.functions.txNonce().call()
        created = delay.functions.txCreatedAt(n).call()
        cooldown = delay.functions.txCooldown().call()
        expiration = delay.functions.txExpiration().call()
        chain_time = relayer.w3.eth.get_block("latest")["timestamp"]
    except Exception as exc:  # noqa: BLE001 - any RPC failure: try again later
        from evm.relayer import RelayUnavailable

        raise RelayUnavailable(f"chain RPC unavailable: {exc}") from None
    if "dispatch_tx" in p:
        return _card_limit_follow_dispatch(action, relayer, actor=actor)
    if tx_nonce > n:
        return _card_limit_dispatched_elsewhere(action, relayer, actor=actor)
    # The Delay judges by block time, which runs ahead of the wall clock when blocks come
    # faster than one a second, and lags on a quiet dev chain: take the later of the two (the
    # dispatch simulation below has the last word).
    now = max(int(timezone.now().timestamp()), chain_time)
    if expiration and now > created + cooldown + expiration:
        return _limit_failed(
            action,
            f"expired in the delay module: not dispatched within {expiration} s after the cooldown",
            actor=actor,
        )
    if tx_nonce < n or now < created + cooldown:
        return action  # an earlier scheduled transaction goes first, or still cooling down
    dispatch = zodiac.execute_next_call(p["roles"], 0, bytes.fromhex(p["inner_data"][2:]))
    try:
        prepared = relayer.prepare(to=p["delay"], data=dispatch)
    except RelayRefused as exc:
        if "cooldown" in str(exc).lower():
            return action  # the chain's clock is a moment behind ours
        return _limit_failed(action, f"the scheduled transaction reverts: {exc}", actor=actor)
    action = _set_params(action, dispatch_tx=prepared.hash, dispatch_raw=prepared.raw)
    return _card_limit_follow_dispatch(action, relayer, actor=actor)


def _card_limit_follow_dispatch(action: Action, relayer, *, actor: Actor) -> Action:
    p = action.params
    receipt = relayer.receipt(p["dispatch_tx"])
    if receipt is None:
        if not relayer.known(p["dispatch_tx"]):
            relayer.send(p["dispatch_raw"])
        receipt = relayer.receipt(p["dispatch_tx"], wait=settings.BUNDLER_TIMEOUT_SECONDS)
    if receipt is None:
        return action
    if receipt["status"] != 1:
        return _limit_failed(
            action,
            f"the scheduled transaction reverted on dispatch (tx {p['dispatch_tx']})",
            actor=actor,
            payload=_receipt_payload(receipt),
        )
    return _card_limit_executed(action, receipt, actor=actor)


def _card_limit_executed(action: Action, receipt: dict, *, actor: Actor) -> Action:
    payload = _receipt_payload(receipt)
    return action_transition(
        action_id=action.pk,
        to=ActionStatus.EXECUTED,
        actor=actor,
        only_from={ActionStatus.BROADCAST},
        updates={
            "error": None,
            "tx_hash": payload["transactionHash"],
            "block_number": payload["blockNumber"],
        },
        detail=(
            f"daily limit of card •••• {action.params['last4']} is now "
            f"{action.params['daily_limit']} {action.params['symbol']} "
            f"(block {payload['blockNumber']}, tx {payload['transactionHash']})"
        ),
        payload=payload,
    )


def _card_limit_dispatched_elsewhere(action: Action, relayer, *, actor: Actor) -> Action:
    """The queue moved past ours without our dispatch: someone else ran it (anyone may), or it
    was skipped as expired. The Roles SetAllowance event of our change tells which."""
    from chain import zodiac

    p = action.params
    try:
        logs = relayer.w3.eth.get_logs(
            {
                "address": relayer.w3.to_checksum_address(p["roles"]),
                "fromBlock": p["enqueued_block"],
                "toBlock": "latest",
                "topics": [zodiac.SET_ALLOWANCE],
            }
        )
    except Exception as exc:  # noqa: BLE001
        from evm.relayer import RelayUnavailable

        raise RelayUnavailable(f"chain RPC unavailable: {exc}") from None
    inner = bytes.fromhex(p["inner_data"][2:])
    for log in logs:
        # The event's data is the call's arguments in order: key, balance, maxRefill, refill, …
        if bytes(log["data"]) == inner[4:]:
            receipt = relayer.receipt("0x" + bytes(log["transactionHash"]).hex())
            if receipt is not None:
                return _card_limit_executed(action, receipt, actor=actor)
    return _limit_failed(
        action, "skipped in the delay module: it expired before it was dispatched", actor=actor
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


# --- Fiat ramps: KYC status, refreshed from the provider on read --------------------------


def ramp_kyc_refresh(*, ramp_id: int, now: datetime | None = None) -> RampAccount:
    """Ask the ramp's provider for its KYC status and store both its word and ours. The
    provider is called outside any transaction; a failure (or a word with no mapping) keeps
    the last status we knew and records why."""
    from actions.providers.ramps import RampError, kyc_provider_status, normalise

    ramp = RampAccount.objects.get(pk=ramp_id)
    now = now or timezone.now()
    try:
        said = kyc_provider_status(ramp.provider, ramp.external_id)
        status = normalise(ramp.provider, said)
    except RampError as exc:
        RampAccount.objects.filter(pk=ramp.pk).update(kyc_error=str(exc)[:2000])
    else:
        RampAccount.objects.filter(pk=ramp.pk).update(
            kyc_status=status, provider_status=said, kyc_checked_at=now, kyc_error=""
        )
    ramp.refresh_from_db()
    return ramp


def ramps_refresh_for_user(*, user) -> list[RampAccount]:
    return [
        ramp_kyc_refresh(ramp_id=pk)
        for pk in RampAccount.objects.filter(user=user)
        .order_by("currency")
        .values_list("pk", flat=True)
    ]


# --- Transaction history: indexed from the chain, our actions and Gnosis Pay ---------------

TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
ZERO_ADDRESS = "0x" + "00" * 20


def _topic(address: str) -> str:
    return "0x" + "00" * 12 + address.lower()[2:]


def _classify(flows: list[TokenTransfer]) -> str:
    """A transaction the chain shows us (no action of ours behind it): vault shares make it an
    investment, an e-money mint or burn a ramp, anything else a transfer."""
    if any(t.token.vault_asset_id for t in flows):
        return HistoryKind.INVESTMENT
    for t in flows:
        if t.token.ramp_provider and ZERO_ADDRESS in (t.from_address, t.to_address):
            return HistoryKind.RAMP
    return HistoryKind.TRANSFER


def _sync_transfers(*, user, w3) -> int:
    """Index the Transfer logs of known tokens to or from the user's accounts, from the oldest
    unindexed block of any of them to the newest confirmed one: two eth_getLogs per range, in
    one JSON-RPC batch. Re-reading a log is harmless (unique on chain, tx, log index)."""
    from datetime import UTC

    from web3 import Web3

    chain_id = settings.CHAIN_ID
    accounts = list(SmartAccount.objects.filter(user=user, chain_id=chain_id))
    tokens = {t.address.lower(): t for t in Token.objects.filter(chain_id=chain_id)}
    if not accounts or not tokens:
        return -1
    latest = w3.eth.block_number - settings.HISTORY_CONFIRMATIONS
    start = max(min(a.history_synced_block for a in accounts) + 1, settings.HISTORY_START_BLOCK)
    ours = {a.address.lower() for a in accounts}
    topics = [_topic(a) for a in sorted(ours)]
    addresses = [Web3.to_checksum_address(a) for a in sorted(tokens)]
    while start <= latest:
        end = min(latest, start + settings.HISTORY_LOG_CHUNK_BLOCKS - 1)
        base = {"fromBlock": start, "toBlock": end, "address": addresses}
        with w3.batch_requests() as batch:
            batch.add(w3.eth.get_logs({**base, "topics": [TRANSFER_TOPIC, topics]}))
            batch.add(w3.eth.get_logs({**base, "topics": [TRANSFER_TOPIC, None, topics]}))
            sent, received = batch.execute()
        logs = {(bytes(log["transactionHash"]), log["logIndex"]): log for log in sent + received}
        blocks = sorted({log["blockNumber"] for log in logs.values()})
        times = {}
        if blocks:
            with w3.batch_requests() as batch:
                for number in blocks:
                    batch.add(w3.eth.get_block(number))
                times = {
                    b["number"]: datetime.fromtimestamp(b["timestamp"], UTC)
                    for b in batch.execute()
                }
        rows = []
        for (tx_hash, index), log in logs.items():
            if len(log["topics"]) != 3 or len(bytes(log["data"])) != 32:
                continue  # an ERC-721 Transfer or a malformed log: not an ERC-20 flow
            rows.append(
                TokenTransfer(
                    chain_id=chain_id,
                    tx_hash="0x" + tx_hash.hex(),
                    log_index=index,
                    block_number=log["blockNumber"],
                    block_time=times[log["blockNumber"]],
                    token=tokens[log["address"].lower()],
                    from_address="0x" + bytes(log["topics"][1])[-20:].hex(),
                    to_address="0x" + bytes(log["topics"][2])[-20:].hex(),
                    units=str(int.from_bytes(bytes(log["data"]), "big")),
                )
            )
        with transaction.atomic():
            TokenTransfer.objects.bulk_create(rows, ignore_conflicts=True)
            by_tx: dict[str, list[TokenTransfer]] = {}
            for row in rows:
                by_tx.setdefault(row.tx_hash, []).append(row)
            for tx_hash, flows in sorted(by_tx.items()):
                HistoryEntry.objects.get_or_create(
                    user=user,
                    chain_id=chain_id,
                    tx_hash=tx_hash,
                    defaults={
                        "occurred_at": flows[0].block_time,
                        "kind": _classify(flows),
                    },
                )
            SmartAccount.objects.filter(
                pk__in=[a.pk for a in accounts], history_synced_block__lt=end
            ).update(history_synced_block=end)
        start = end + 1
    return latest


_ACTION_KINDS = {
    ActionType.TRANSFER: HistoryKind.TRANSFER,
    ActionType.SWAP: HistoryKind.SWAP,
    ActionType.CARD_FREEZE: HistoryKind.CARD_FREEZE,
    ActionType.CARD_UNFREEZE: HistoryKind.CARD_UNFREEZE,
    ActionType.CARD_LIMIT_SET: HistoryKind.CARD_LIMIT,
}


@transaction.atomic
def _sync_actions(*, user) -> None:
    """Executed actions join the history; one with a transaction enriches that tx's entry.
    An entry's occurred_at is never changed once written (it is the page key)."""
    pending = Action.objects.filter(
        user=user, status=ActionStatus.EXECUTED, history_entry__isnull=True
    ).order_by("executed_at", "pk")
    for action in pending:
        kind = _ACTION_KINDS[action.type]
        if not action.tx_hash:  # get_or_create: another sync may be writing it right now
            HistoryEntry.objects.get_or_create(
                action=action,
                defaults={"user": user, "occurred_at": action.executed_at, "kind": kind},
            )
            continue
        entry, created = HistoryEntry.objects.get_or_create(
            user=user,
            chain_id=action.chain_id,
            tx_hash=action.tx_hash.lower(),
            defaults={"occurred_at": action.executed_at, "kind": kind, "action": action},
        )
        if not created and entry.action_id is None:
            HistoryEntry.objects.filter(pk=entry.pk).update(action=action, kind=kind)


def _parse_time(value: Any) -> datetime | None:
    from django.utils.dateparse import parse_datetime

    return parse_datetime(value) if isinstance(value, str) and value else None


def _sync_card_purchases(*, user) -> dict[str, Any]:
    """Card purchases from Gnosis Pay, with the JWT of the last passkey sign-in for the card's
    Safe (it lasts under an hour; without one we show what we synced before, and say so)."""
    from actions.providers.gnosis_pay import GnosisPayError, Unauthorized
    from actions.selectors import gnosis_pay_session_token

    cards = list(Card.objects.filter(user=user, is_virtual=False).order_by("pk"))
    if not cards:
        return {"syncedAt": None, "error": None}
    errors, synced = [], None
    client = _gnosis_pay(timeout=settings.BUNDLER_TIMEOUT_SECONDS)
    for safe in sorted({c.safe_address for c in cards}):
        token = gnosis_pay_session_token(safe_address=safe)
        if not token:
            errors.append(
                f"no Gnosis Pay session for {safe}: card purchases are as of the last sync "
                "(a card action signs in again)"
            )
            continue
        try:
            items = client.card_transactions(token=token)
        except Unauthorized:
            GnosisPaySession.objects.filter(safe_address=safe.lower()).delete()
            errors.append(f"the Gnosis Pay session for {safe} expired")
            continue
        except GnosisPayError as exc:
            errors.append(str(exc))
            continue
        by_id = {c.card_id: c for c in Card.objects.filter(user=user, safe_address=safe)}
        physical = next(c for c in cards if c.safe_address == safe)
        for item in items:
            try:
                _store_purchase(
                    user=user, card=by_id.get(str(item.get("cardToken")), physical), item=item
                )
            except (ValueError, TypeError, KeyError, AttributeError):
                errors.append(
                    f"Gnosis Pay sent an unreadable card transaction {item.get('threadId')!r}"
                )
        synced = timezone.now()
    return {
        "syncedAt": rfc3339(synced),
        "error": "; ".join(errors) or None,
    }


@transaction.atomic
def _store_purchase(*, user, card: Card, item: dict[str, Any]) -> None:
    hashes = [
        str(t["hash"]).lower()
        for t in item.get("transactions") or []
        if isinstance(t, dict) and isinstance(t.get("hash"), str)
    ]
    purchase, _ = CardPurchase.objects.update_or_create(
        thread_id=str(item["threadId"]),
        defaults={
            "card": card,
            "occurred_at": _parse_time(item["createdAt"]) or timezone.now(),
            "cleared_at": _parse_time(item.get("clearedAt")),
            "is_pending": bool(item["isPending"]),
            "kind": str(item["kind"])[:20],
            "status": str(item["status"])[:40],
            "mcc": str(item["mcc"])[:4],
            "merchant": item["merchant"],
            "country": item.get("country"),
            "billing_amount": int(item["billingAmount"]),
            "billing_currency": item["billingCurrency"],
            "transaction_amount": int(item["transactionAmount"]),
            "transaction_currency": item["transactionCurrency"],
            "transaction_type": str(item.get("transactionType") or "")[:10],
            "tx_hashes": hashes,
            "raw": item,
            "synced_at": timezone.now(),
        },
    )
    entry = HistoryEntry.objects.filter(card_purchase=purchase).first()
    on_chain = (
        HistoryEntry.objects.select_for_update()
        .filter(user=user, chain_id=card.chain_id, tx_hash=hashes[0])
        .first()
        if hashes
        else None
    )
    if on_chain is not None and on_chain.card_purchase_id is None and on_chain.action_id is None:
        if entry is None:
            # The settlement was indexed from the chain first: that line is this purchase.
            HistoryEntry.objects.filter(pk=on_chain.pk).update(
                card_purchase=purchase, kind=HistoryKind.CARD_PURCHASE
            )
            return
        on_chain.delete()  # it settled after we listed it: its line takes the hash
        on_chain = None
    # A tx line owned by something else (an action, another purchase settled in the same tx)
    # keeps its hash; this purchase still names the tx in its receipts.
    tx_hash = hashes[0] if hashes and on_chain is None else None
    if entry is None:
        HistoryEntry.objects.get_or_create(
            card_purchase=purchase,
            defaults={
                "user": user,
                "occurred_at": purchase.occurred_at,
                "kind": HistoryKind.CARD_PURCHASE,
                "chain_id": card.chain_id if tx_hash else None,
                "tx_hash": tx_hash,
            },
        )
    elif tx_hash and entry.tx_hash is None:
        HistoryEntry.objects.filter(pk=entry.pk).update(chain_id=card.chain_id, tx_hash=tx_hash)


def card_purchases_sync_signed_in() -> int:
    """Beat task: fetch card purchases for every card account with a live Gnosis Pay session,
    so purchases made while a session lasts are kept even if nobody reads the history then."""
    from django.contrib.auth import get_user_model

    GnosisPaySession.objects.filter(expires_at__lte=timezone.now()).delete()  # lapsed: forget
    live = GnosisPaySession.objects.values("safe_address")
    users = sorted(
        set(
            Card.objects.filter(is_virtual=False)
            .annotate(safe=Lower("safe_address"))
            .filter(safe__in=live)
            .values_list("user_id", flat=True)
        )
    )
    for user in get_user_model().objects.filter(pk__in=users).order_by("pk"):
        _sync_card_purchases(user=user)
    return len(users)


def history_sync(*, user, w3=None) -> dict[str, Any]:
    """Bring the user's history up to date; each source that fails is reported, not fatal:
    what was indexed before is still served."""
    from actions.selectors import chain_reader

    w3 = w3 or chain_reader()
    chain: dict[str, Any] = {"chainId": settings.CHAIN_ID, "syncedToBlock": None, "error": None}
    try:
        block = _sync_transfers(user=user, w3=w3)
        chain["syncedToBlock"] = block if block >= 0 else None
    except Exception as exc:  # noqa: BLE001 - RPC down or garbage: history as indexed so far
        chain["error"] = f"The chain could not be read: {exc}"[:500]
    _sync_actions(user=user)
    cards = _sync_card_purchases(user=user)
    return {"chain": chain, "gnosisPay": cards}
