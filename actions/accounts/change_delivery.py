"""An owner change carried out on chain: each chain's user operation delivered to its bundler,
applied on one chain and not (yet) on another, reconciled. The change is proposed, signed,
cancelled or expired in owner_changes.py; the submit task starts here."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from actions.accounts.mail import DEVICE_ADDED, DEVICE_REMOVED, mail_on_commit
from actions.accounts.models import (
    ACCOUNT_CHANGE_LIFECYCLE,
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    OwnerState,
    Passkey,
    SmartAccount,
)
from actions.accounts.owner_changes import change_client, passkey_key, picnic_accounts
from actions.evm_clients import ChainUnavailable, bundler_client, on_chain
from core.chains import get_chain
from core.lifecycle import (
    Actor,
    IllegalTransition,
    record_history,
    transition,
)
from evm.bundler import BundlerError, SendVerdict, classify_send_error
from evm.userops import to_rpc

logger = logging.getLogger(__name__)

K = AccountChangeKind
S = AccountChangeStatus


def account_change_submit(*, change_id) -> AccountChange:
    """signed → submitted, then each chain's op to its bundler. A refusal for good fails the
    change; a transient error is retried by `account_changes_process`."""
    change = transition(
        lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
        pk=change_id,
        to=S.SUBMITTED,
        actor=Actor.worker(),
        only_from={S.SIGNED},
        detail="delivering the user operations to the bundlers",
    )
    return _send_ops(change)


def _send_ops(change: AccountChange, *, only_unknown: bool = False) -> AccountChange:
    """Deliver each chain's op not yet included and not waiting out its backoff. A re-send
    (`only_unknown`) goes only to a bundler that does not hold the op. A chain that cannot be
    reached is retried later (`_chain_behind`); a refusal for good fails the change unless
    that chain already shows the change (the op was included meanwhile, or a re-sent one was
    refused as already known to the account: AA10, AA25, "already an owner")."""
    ops = [dict(op) for op in change.ops]
    now = timezone.now()
    for op in ops:
        if op["done"] or not _due(op, now):
            continue
        client = bundler_client(op["chain_id"])
        try:
            if only_unknown and client.get_user_operation_by_hash(op["user_op_hash"]) is not None:
                continue
            client.send_user_operation(to_rpc(op["user_op"]), op["entry_point"])
        except BundlerError as exc:
            verdict = classify_send_error(exc)
            if verdict == SendVerdict.FINAL:
                if _chain_has_change(change, op["chain_id"]):
                    _chain_done(change, op, tx_hash=None, note="already had the change")
                    continue
                if (
                    not only_unknown
                    or client.get_user_operation_receipt(op["user_op_hash"]) is None
                ):
                    _save_ops(change, ops)
                    return _fail(change, f"bundler refused on chain {op['chain_id']}: {exc}")
            if verdict == SendVerdict.TRANSIENT:
                _chain_behind(change, op, str(exc), now=now)
            logger.warning("account change %s: chain %s: %s", change.pk, op["chain_id"], exc)
    return _save_ops(change, ops)


# --- One chain at a time: a change applied on one chain and not (yet) on another -----------

REPAIR_FIRST_BACKOFF_SECONDS = 10


def _due(op: dict, now) -> bool:
    retry_at = op.get("retry_at")
    return retry_at is None or datetime.fromisoformat(retry_at) <= now


def _chain_behind(change: AccountChange, op: dict, error: str, *, now) -> None:
    """`op`'s chain could not be reached: try again after a delay that doubles per attempt
    (up to ACCOUNT_CHANGE_REPAIR_MAX_BACKOFF_SECONDS). The first miss writes a history row;
    the change stays submitted (and in the console's stuck list) until every chain has it."""
    attempts = op.get("attempts", 0) + 1
    delay = min(
        REPAIR_FIRST_BACKOFF_SECONDS * 2 ** (attempts - 1),
        settings.ACCOUNT_CHANGE_REPAIR_MAX_BACKOFF_SECONDS,
    )
    op.update(
        attempts=attempts,
        retry_at=(now + timedelta(seconds=delay)).isoformat(),
        error=error[:500],
    )
    if attempts == 1:
        _chain_history(change, f"chain {op['chain_id']} unreachable, retrying: {error[:500]}")


def _chain_done(change: AccountChange, op: dict, *, tx_hash: str | None, note: str) -> None:
    """`op`'s chain has the change: one history row per chain (after a repair: how long)."""
    repaired = f" after {op['attempts']} retries" if op.get("attempts") else ""
    op.update(done=True, tx_hash=tx_hash, retry_at=None, error=None)
    where = f"tx {tx_hash}" if tx_hash else note
    _chain_history(change, f"chain {op['chain_id']}: included{repaired} ({where})")


def _chain_history(change: AccountChange, detail: str) -> None:
    """A row on the change's timeline that is not a move (its status stays as it is)."""
    record_history(
        lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
        instance=change,
        from_status=change.status,
        status=change.status,
        actor=Actor.worker(),
        detail=detail,
    )


def _save_ops(change: AccountChange, ops: list[dict]) -> AccountChange:
    """Per-chain state, kept on the row; `behind_since` marks a change some chain has and
    another has not (the console lists it as stuck until it is whole again)."""
    if ops == change.ops:
        return change
    done = [op["done"] for op in ops]
    behind = any(done) and not all(done)
    AccountChange.objects.filter(pk=change.pk, status=change.status).update(
        ops=ops,
        behind_since=(change.behind_since or timezone.now()) if behind else None,
    )
    change.ops = ops
    return change


def _chain_has_change(change: AccountChange, chain_id: int) -> bool:
    """Whether the account on `chain_id` already shows the change (read from the contract):
    the added owner is an owner, the removed one is not, the recovery key is set, no
    recovery is pending. False when the chain cannot be read."""
    account = next((a for a in picnic_accounts(user=change.user) if a.chain_id == chain_id), None)
    if account is None:
        return False
    try:
        with on_chain(get_chain(chain_id)):
            client = change_client(account)
            if change.kind in (K.ADD_OWNER, K.REMOVE_OWNER):
                added = client.owner_index(*passkey_key(change.passkey)) is not None
                return added if change.kind == K.ADD_OWNER else not added
            state = client.recovery_state()
            if change.kind == K.SET_RECOVERY:
                return state is not None and (state.key.lower(), state.delay) == (
                    change.params["recovery_address"].lower(),
                    change.params["delay_seconds"],
                )
            if change.kind == K.CANCEL_RECOVERY:
                return state is None or state.pending is None
    except ChainUnavailable:
        return False
    return False


def change_settle(
    change: AccountChange,
    *,
    to: str,
    actor: Actor,
    detail: str,
    only_from: set[str] | None = None,
    updates: dict | None = None,
) -> tuple[AccountChange, bool]:
    """A change's end and what it does to the owners, in one transaction: executed applies it,
    failed or cancelled undoes what it held. A change another process ended first is read
    again and returned with False (nothing applied or undone twice)."""
    with transaction.atomic():
        try:
            ended = transition(
                lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
                pk=change.pk,
                to=to,
                actor=actor,
                only_from=only_from,
                updates=updates,
                detail=detail,
            )
        except IllegalTransition:
            return AccountChange.objects.get(pk=change.pk), False
        if to == S.EXECUTED:
            _apply(ended)
        else:
            _undo(ended)
    return ended, True


def _fail(change: AccountChange, message: str) -> AccountChange:
    return change_settle(
        change,
        to=S.FAILED,
        actor=Actor.worker(),
        updates={"error": message[:2000]},
        detail=message[:2000],
    )[0]


def _undo(change: AccountChange) -> None:
    """A failed or cancelled change leaves its passkey as it was."""
    if change.kind == K.REMOVE_OWNER and change.passkey_id:
        Passkey.objects.filter(pk=change.passkey_id, owner_state=OwnerState.REMOVING).update(
            owner_state=OwnerState.ACTIVE
        )
    if change.kind == K.RECOVERY and change.passkey_id:
        Passkey.objects.filter(pk=change.passkey_id, owner_state=OwnerState.PENDING).update(
            owner_state=OwnerState.REMOVED, removed_at=timezone.now()
        )


def owner_index_on_chain(*, account: SmartAccount, passkey: Passkey) -> int | None:
    """The index `passkey` signs as on the account's chain (None: not a live owner there)."""
    qx, qy = passkey_key(passkey)
    return change_client(account).owner_index(qx, qy)


def _apply(change: AccountChange) -> None:
    """What an executed change means for the passkeys (in the executing transaction)."""
    now = timezone.now()
    if change.kind in (K.ADD_OWNER, K.RECOVERY) and change.passkey_id:
        # Every change applies on every chain from the same owners, so the index is the same
        # on each; a difference (a chain that missed a change) is an error staff must see.
        indexes = {
            account.chain_id: owner_index_on_chain(account=account, passkey=change.passkey)
            for account in picnic_accounts(user=change.user)
        }
        if len(set(indexes.values())) != 1:
            logger.error("account change %s: owner indexes differ by chain: %s", change.pk, indexes)
        Passkey.objects.filter(pk=change.passkey_id).update(
            owner_state=OwnerState.ACTIVE, owner_index=next(iter(indexes.values()))
        )
        if change.kind == K.ADD_OWNER:
            mail_on_commit(change, DEVICE_ADDED)
    elif change.kind == K.REMOVE_OWNER and change.passkey_id:
        Passkey.objects.filter(pk=change.passkey_id).update(
            owner_state=OwnerState.REMOVED, removed_at=now
        )
        mail_on_commit(change, DEVICE_REMOVED)
    elif change.kind == K.CANCEL_RECOVERY and change.target_id:
        change_settle(
            change.target,
            to=S.CANCELLED,
            actor=Actor.end_user(change.user),
            only_from={S.WAITING, S.SUBMITTED},
            detail=f"cancelled by an owner (change {change.pk})",
        )


def account_change_reconcile(*, change: AccountChange) -> AccountChange:
    """A submitted change: each chain's receipt; executed once every chain has it. A chain
    that is down is asked again after its backoff, and its op re-sent when it is back."""
    ops = [dict(op) for op in change.ops]
    now = timezone.now()
    for op in ops:
        if op["done"] or not _due(op, now):
            continue
        try:
            receipt = bundler_client(op["chain_id"]).get_user_operation_receipt(op["user_op_hash"])
        except BundlerError as exc:
            _chain_behind(change, op, str(exc), now=now)
            logger.warning("account change %s: chain %s: %s", change.pk, op["chain_id"], exc)
            continue
        if receipt is None:
            continue
        if not receipt.success:
            # Included but reverted: "already an owner" (and its kin) means this chain had
            # the change already: done, never applied twice.
            if _chain_has_change(change, op["chain_id"]):
                _chain_done(change, op, tx_hash=receipt.tx_hash, note="already had the change")
                continue
            _save_ops(change, ops)
            return _fail(change, f"chain {op['chain_id']}: {receipt.reason}")
        _chain_done(change, op, tx_hash=receipt.tx_hash, note="")
    change = _save_ops(change, ops)
    if not all(op["done"] for op in ops):
        return _send_ops(AccountChange.objects.get(pk=change.pk), only_unknown=True)
    return change_settle(
        change,
        to=S.EXECUTED,
        actor=Actor.worker(),
        only_from={S.SUBMITTED},
        updates={"ops": ops, "error": None, "behind_since": None},
        detail="included on every chain: "
        + ", ".join(f"{op['chain_id']} tx {op['tx_hash']}" for op in ops),
    )[0]
