"""Card limit: the card's daily limit is the Roles allowance of its Safe. A change is a
passkey-signed Zodiac module transaction that the relayer sends (not 4337); the Safe's Delay
modifier holds it for its cooldown, then the relayer dispatches it."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone

from actions.chain_reads import CHAIN_RPC_ERRORS
from actions.evm_clients import card_relayer
from actions.execution.models import ACTION_LIFECYCLE, PENDING_ON_CHAIN, Action, ActionStatus
from actions.execution.public import (
    ActionKind,
    ReconcileOutcome,
    action_record_error,
    action_touch,
    outcome_of,
)
from core.lifecycle import Actor, transition
from evm import zodiac
from evm.relayer import RelayError, RelayRefused, RelayUnavailable


def _card_relayer(action: Action, timeout: float | None = None):
    """The relayer on the action's chain (the card's)."""
    return card_relayer(action.chain_id, timeout=timeout)


def _set_params(action: Action, **changes: Any) -> Action:
    """Record relay bookkeeping (transaction hashes) before the transaction leaves."""
    params = {**action.params, **changes}
    Action.objects.filter(pk=action.pk).update(params=params, updated_at=timezone.now())
    action.params = params
    return action


def _limit_failed(action: Action, message: str, *, actor: Actor, payload: Any = None) -> Action:
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
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
    action = transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action_id,
        to=ActionStatus.SUBMITTED,
        actor=Actor.worker(),
        detail="relaying the signed delay-module transaction",
        only_from={ActionStatus.SIGNED},
    )
    return _card_limit_relay(action, actor=Actor.worker(), wait=settings.GNOSIS_PAY_TIMEOUT_SECONDS)


def _card_limit_relay(action: Action, *, actor: Actor, wait: float) -> Action:
    p = action.params
    relayer = _card_relayer(action, wait)
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
        return action_record_error(action, str(exc))
    action = _set_params(action, relay_tx=prepared.hash, relay_raw=prepared.raw)
    return _card_limit_follow_relay(action, relayer, actor=actor, wait=wait)


def _card_limit_follow_relay(action: Action, relayer, *, actor: Actor, wait: float) -> Action:
    p = action.params
    try:
        receipt = _receipt_or_resend(relayer, p["relay_tx"], p["relay_raw"], wait=wait)
    except RelayError as exc:
        return action_record_error(action, str(exc))
    if receipt is None:
        return action_record_error(action, f"relay transaction {p['relay_tx']} is not mined yet")
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
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
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

    # Bounded like the bundler: this runs inside get_action_status too.
    relayer = _card_relayer(action, settings.BUNDLER_TIMEOUT_SECONDS)
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
        action_record_error(action, str(exc))
        action_touch(action_id=action.pk, last_reconcile_error=str(exc)[:2000])
        return ReconcileOutcome.UNAVAILABLE
    action_touch(action_id=action.pk, last_reconcile_error="")
    return outcome_of(action)


def _card_limit_follow_queue(action: Action, relayer, *, actor: Actor) -> Action:
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
    except CHAIN_RPC_ERRORS as exc:  # the node did not answer usably: try again later
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


def _receipt_or_resend(relayer, tx_hash: str, raw: str, *, wait: float) -> dict | None:
    """The transaction's receipt. One the node does not know (it never left, or was dropped)
    is sent again, the same signed transaction, so it cannot happen twice; then waited for."""
    receipt = relayer.receipt(tx_hash)
    if receipt is None:
        if not relayer.known(tx_hash):
            relayer.send(raw)
        receipt = relayer.receipt(tx_hash, wait=wait)
    return receipt


def _card_limit_follow_dispatch(action: Action, relayer, *, actor: Actor) -> Action:
    p = action.params
    receipt = _receipt_or_resend(
        relayer, p["dispatch_tx"], p["dispatch_raw"], wait=settings.BUNDLER_TIMEOUT_SECONDS
    )
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
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
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
    except CHAIN_RPC_ERRORS as exc:
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


def card_limit_signed_updates(*, action: Action, signature: str) -> dict:
    """PasskeyAccount.execModuleTx checks the raw assertion itself."""
    return {"params": {**action.params, "module_signature": signature}}


class CardLimit(ActionKind):
    """A Zodiac module transaction, relayed, held by the card Safe's Delay for its cooldown."""

    signed_note = "Signed by the user; relaying the change to the card's delay module."

    def in_flight_note(self, status):
        return (
            "Queued in the card's delay module; waiting for its cooldown to pass before the "
            "new limit takes effect."
        )

    def signed_updates(self, action, *, account, signature):
        return card_limit_signed_updates(action=action, signature=signature)

    def send(self, *, action_id, client=None):
        return card_limit_submit(action_id=action_id)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return card_limit_reconcile(action=action, actor=actor)
