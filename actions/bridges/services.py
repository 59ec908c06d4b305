"""The destination leg of a cross-chain swap.

The action follows the seed's lifecycle exactly: it is `executed` when its source transaction
is mined. The bridge then delivers on the other chain, later; that second leg is a `BridgeLeg`
next to the action, followed by polling LI.FI's `/v1/status` (with backoff, until DONE or
FAILED). Each change of the leg is also written to the action's status history as a row that
keeps the status (`executed` → `executed`) with a detail starting "destination leg:", so
get_action_status's `status_history`, the staff timeline and the signing page all show both
legs without a status the seed does not have. A leg that never finishes is never marked done:
past its deadline the console flags it, and it is still polled.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from actions.bridges.mail import bridge_leg_mail
from actions.bridges.models import BridgeLeg
from actions.contract import ACTION_OUTCOMES
from actions.execution.models import ACTION_LIFECYCLE, LEG_DETAIL, Action, ActionStatus
from actions.execution.public import action_touch
from actions.providers.lifi import BridgeStatus, LifiClient, QuoteError, SwapQuote, lifi_client
from core import tracing
from core.chains import chain_name
from core.lifecycle import Actor, record_history

logger = logging.getLogger(__name__)

WAITING = ("", "NOT_FOUND", "INVALID", "PENDING")


def bridge_leg_open(*, action: Action, quote: SwapQuote, to_asset_id: str) -> BridgeLeg:
    """At proposal: the leg a cross-chain swap will have once its source transaction runs."""
    return BridgeLeg.objects.create(
        action=action,
        from_chain_id=quote.from_chain_id,
        to_chain_id=quote.to_chain_id,
        tool=quote.tool[:64],
        to_asset_id=to_asset_id,
        to_symbol=str(quote.to_token.get("symbol") or "?")[:20],
    )


def bridge_leg_of(action: Action) -> BridgeLeg | None:
    """The destination leg of a cross-chain swap; None for any other action."""
    if action.type != "swap" or not (action.params or {}).get("cross_chain"):
        return None
    return BridgeLeg.objects.filter(action=action).first()


def leg_open(action: Action, leg: BridgeLeg | None) -> bool:
    """Whether the page of an executed action must stay live: its bridge is still going."""
    return leg is not None and not leg.finished and action.status == ActionStatus.EXECUTED


def _amount(units: int, token: dict) -> str:
    try:
        decimals = int(token.get("decimals", 18))
    except (TypeError, ValueError):
        decimals = 18
    return format(Decimal(units).scaleb(-decimals).normalize(), "f")


def leg_detail(leg: BridgeLeg) -> str:
    """The leg in one English line (status history, staff timeline, the agent's answer)."""
    words = f"({leg.status}{', ' + leg.substatus if leg.substatus else ''})"
    tx = f", tx {leg.receiving_tx_hash}" if leg.receiving_tx_hash else ""
    where = chain_name(leg.receiving_chain_id or leg.to_chain_id)
    if leg.status == "DONE" and leg.substatus == "REFUNDED":
        return (
            f"{LEG_DETAIL}refunded {leg.received_amount} {leg.received_symbol} on {where}{tx}: "
            f"the bridge did not deliver {leg.to_symbol} and sent the tokens back {words}"
        )
    if leg.status == "DONE" and leg.substatus == "PARTIAL":
        return (
            f"{LEG_DETAIL}received {leg.received_amount} {leg.received_symbol} on {where}"
            f"{tx}, instead of {leg.to_symbol}: the bridge delivered another token {words}"
        )
    if leg.status == "DONE":
        return f"{LEG_DETAIL}received {leg.received_amount} {leg.received_symbol} on {where}{tx}"
    if leg.status == "FAILED":
        why = f": {leg.substatus_message}" if leg.substatus_message else ""
        return (
            f"{LEG_DETAIL}the bridge failed {words}{why}; nothing arrived on "
            f"{chain_name(leg.to_chain_id)}"
        )
    if leg.substatus == "CHAIN_NOT_AVAILABLE":
        return (
            f"{LEG_DETAIL}waiting: {chain_name(leg.to_chain_id)} is not reachable, the bridge "
            f"delivers {leg.to_symbol} when it is {words}"
        )
    return (
        f"{LEG_DETAIL}waiting for the bridge to deliver {leg.to_symbol} on "
        f"{chain_name(leg.to_chain_id)} {words}"
    )


# What happened, beside the seed's status (docs/decisions/0006-action-outcome.md): an action
# whose source transaction is `executed` may still have been refunded by the bridge.
OUTCOMES = tuple(ACTION_OUTCOMES)
_ENDED = {
    ActionStatus.FAILED: "failed",
    ActionStatus.EXPIRED: "expired",
    ActionStatus.REJECTED: "rejected",
}


def action_outcome(action: Action, leg: BridgeLeg | None) -> tuple[str, str | None]:
    """(outcome, outcome_detail): for an executed cross-chain swap, what its destination leg
    did (refunded, another token, failed, still waiting); otherwise what the status means."""
    if action.status in _ENDED:
        return _ENDED[action.status], action.error if action.status == ActionStatus.FAILED else None
    if action.status != ActionStatus.EXECUTED:
        return "pending", None
    if leg is None:
        return "completed", None
    return leg_outcome(leg), leg_detail(leg).removeprefix(LEG_DETAIL)


def leg_outcome(leg: BridgeLeg) -> str:
    """What the destination leg of an executed swap did, in action_outcome's words (reads
    only its status and substatus)."""
    if leg.status == "DONE":
        return {"REFUNDED": "refunded", "PARTIAL": "partial"}.get(leg.substatus, "completed")
    return "failed" if leg.status == "FAILED" else "pending"


def _next_check(checks: int, now: datetime) -> datetime:
    """BRIDGE_POLL_SECONDS, then doubling, at most BRIDGE_POLL_MAX_SECONDS."""
    seconds = settings.BRIDGE_POLL_SECONDS * 2 ** max(checks - 1, 0)
    return now + timedelta(seconds=min(seconds, settings.BRIDGE_POLL_MAX_SECONDS))


def bridge_reconcile(
    *, leg_id, client: LifiClient | None = None, actor: Actor | None = None
) -> str:
    """Ask the bridge once where the leg is; record what changed. Never raises for a provider
    problem (it is recorded on the leg and asked again later). Returns LI.FI's status, or
    "unavailable" / "not_started" / "raced" (another reconciler is asking right now).

    Not one transaction: none may stay open across the network call. The check is claimed
    first (a conditional update on `checks`), and only the claimer writes what it heard, so
    two reconcilers never write the same change twice."""
    leg = BridgeLeg.objects.select_related("action").get(pk=leg_id)
    action = leg.action
    now = timezone.now()
    if action.status != ActionStatus.EXECUTED or not action.tx_hash:
        return "not_started"
    if leg.finished:
        return leg.status
    if leg.started_at is None:
        leg.started_at = action.executed_at or now
        leg.deadline = leg.started_at + timedelta(minutes=settings.BRIDGE_DEADLINE_MINUTES)
    claimed = leg.checks + 1
    leg.last_checked_at, leg.next_check_at = now, _next_check(claimed, now)
    if not BridgeLeg.objects.filter(pk=leg.pk, checks=leg.checks).update(
        checks=claimed,
        last_checked_at=leg.last_checked_at,
        next_check_at=leg.next_check_at,
        started_at=leg.started_at,
        deadline=leg.deadline,
    ):
        return "raced"
    leg.checks = claimed
    mine = BridgeLeg.objects.filter(pk=leg.pk, checks=claimed)
    try:
        answer = (client or lifi_client()).status(
            tx_hash=action.tx_hash,
            from_chain=leg.from_chain_id,
            to_chain=leg.to_chain_id,
            bridge=leg.tool,
        )
    except QuoteError as exc:
        logger.warning("bridge status of %s: %s", action.pk, exc)
        mine.update(last_error=str(exc)[:2000])
        return "unavailable"
    changed = _apply(leg, answer)
    if leg.finished:
        leg.done_at, leg.next_check_at = now, None
    with transaction.atomic():
        if not mine.update(
            last_error="",
            done_at=leg.done_at,
            next_check_at=leg.next_check_at,
            **{name: getattr(leg, name) for name in _ANSWER_FIELDS},
        ):
            return "raced"
        if changed:
            record_history(
                lifecycle=ACTION_LIFECYCLE,
                instance=action,
                from_status=action.status,
                status=action.status,
                actor=actor or Actor.worker(),
                detail=leg_detail(leg),
                payload=answer.raw,
            )
            # updated_at and an event: the live timelines and the signing page re-render.
            action_touch(action_id=action.pk, last_reconciled_at=now)
            if leg.finished:
                transaction.on_commit(partial(bridge_leg_mail, leg_id=leg.pk))
    return leg.status


# What one /status answer sets on the leg (_apply).
_ANSWER_FIELDS = (
    "status",
    "substatus",
    "substatus_message",
    "receiving_tx_hash",
    "receiving_chain_id",
    "received_symbol",
    "received_asset_id",
    "received_amount",
)


def _apply(leg: BridgeLeg, answer: BridgeStatus) -> bool:
    """Copy the answer onto the leg; whether anything people see changed."""
    before = (leg.status, leg.substatus, leg.receiving_tx_hash)
    leg.status = answer.status
    leg.substatus = answer.substatus[:64]
    leg.substatus_message = answer.message[:2000]
    if answer.receiving_tx_hash:
        token = answer.receiving_token
        leg.receiving_tx_hash = answer.receiving_tx_hash[:66]
        leg.receiving_chain_id = answer.receiving_chain_id or leg.to_chain_id
        leg.received_symbol = str(token.get("symbol") or "")[:20]
        if token.get("address"):
            leg.received_asset_id = f"eip155:{leg.receiving_chain_id}/erc20:{token['address']}"
        if answer.receiving_amount is not None:
            leg.received_amount = _amount(answer.receiving_amount, token)
    return before != (leg.status, leg.substatus, leg.receiving_tx_hash)


def bridge_legs_due(*, limit: int, now: datetime | None = None) -> QuerySet[BridgeLeg]:
    """Legs whose source transaction is mined and whose bridge has not finished, due a check,
    least recently checked first."""
    now = now or timezone.now()
    return (
        BridgeLeg.objects.filter(status__in=WAITING, action__status=ActionStatus.EXECUTED)
        .filter(Q(next_check_at__isnull=True) | Q(next_check_at__lte=now))
        .order_by("next_check_at", "pk")[:limit]
    )


def bridges_reconcile_pending(
    *, batch_size: int | None = None, client: LifiClient | None = None
) -> Counter:
    """Beat task: one batch of due legs."""
    client = client or lifi_client()
    outcomes: Counter = Counter()
    rows = list(
        bridge_legs_due(limit=batch_size or settings.BRIDGE_RECONCILE_BATCH_SIZE).values_list(
            "pk", "action_id", "action__trace_id"
        )
    )
    for pk, action_id, trace_id in rows:
        with tracing.adopt(trace_id), tracing.bind(action_id=action_id):
            outcomes[bridge_reconcile(leg_id=pk, client=client)] += 1
    return outcomes


def bridges_waiting(*, now: datetime | None = None) -> list:
    """Ids of the actions whose bridge has been waiting longer than BRIDGE_STUCK_AFTER_MINUTES
    since the source transaction (past its deadline included), or failed in the last day: what
    the console lists; refunded or another token delivered in the last day too. Read from the legs first (their status index), because an OR of the
    actions' own filters with one that reaches into the legs' join made PostgreSQL scan every
    action (the console home grew linearly with the table)."""
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=settings.BRIDGE_STUCK_AFTER_MINUTES)
    waiting = Q(
        status__in=WAITING,
        action__status=ActionStatus.EXECUTED,
        action__executed_at__lt=cutoff,
    )
    day = now - timedelta(days=1)
    failed = Q(status="FAILED", done_at__gte=day)
    # Refunded or another token: the user did not get what they asked for; support is asked.
    not_as_asked = Q(status="DONE", substatus__in=("REFUNDED", "PARTIAL"), done_at__gte=day)
    found = BridgeLeg.objects.filter(waiting | failed | not_as_asked)
    return list(found.values_list("action_id", flat=True))


def bridge_why(action: Action, now: datetime) -> str | None:
    """Why the console lists this action for its bridge, or None."""
    leg = getattr(action, "bridge_leg", None)
    if leg is None or action.executed_at is None:
        return None
    if leg.status == "FAILED":
        return "bridge failed"
    if leg.substatus == "REFUNDED":
        return "bridge refunded: the swap did not happen"
    if leg.substatus == "PARTIAL":
        return "bridge delivered another token"
    if leg.finished:
        return None
    deadline = leg.deadline or action.executed_at + timedelta(
        minutes=settings.BRIDGE_DEADLINE_MINUTES
    )
    if deadline < now:
        return "bridge past its deadline"
    minutes = int((now - action.executed_at).total_seconds() // 60)
    return f"bridge waiting {minutes} min"
