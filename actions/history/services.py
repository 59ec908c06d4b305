"""Transaction history: the user's lines, indexed from the chain (ERC-20 Transfer logs of known
tokens), our executed actions and Gnosis Pay card purchases. Each source that fails is reported
and what was indexed before is still served."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from web3 import Web3

from actions.accounts.models import SmartAccount, Token
from actions.card.models import Card, GnosisPaySession
from actions.card.public import gnosis_pay_client, gnosis_pay_session_token
from actions.chain_reads import (
    CHAIN_RPC_ERRORS,
    ChainAnswerError,
    ChainOutcome,
    chain_error,
    node_answer,
    read_chains,
)
from actions.execution.models import Action, ActionStatus
from actions.execution.public import history_types, kind_of
from actions.history.models import CardPurchase, HistoryEntry, HistoryKind, TokenTransfer
from actions.providers.gnosis_pay import GnosisPayError, Unauthorized
from core.chains import all_chains
from core.formats import rfc3339

logger = logging.getLogger(__name__)

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


@dataclass
class _ChainPlan:
    """What one chain's sync needs from the database, read before the network I/O."""

    accounts: list[SmartAccount]
    tokens: dict[str, Token]
    start: int


@dataclass
class _ChainFetch:
    """What a chain's node gave: the newest confirmed block and the flows of each range read,
    in order; `error` when it stopped answering part-way (the ranges read are still kept)."""

    latest: int
    ranges: list[tuple[int, list[dict]]] = field(default_factory=list)
    error: BaseException | None = None


def _plan_transfers(*, user, chain_id: int) -> _ChainPlan | None:
    accounts = list(SmartAccount.objects.filter(user=user, chain_id=chain_id))
    tokens = {t.address.lower(): t for t in Token.objects.filter(chain_id=chain_id)}
    if not accounts or not tokens:
        return None
    start = max(min(a.history_synced_block for a in accounts) + 1, settings.HISTORY_START_BLOCK)
    return _ChainPlan(accounts=accounts, tokens=tokens, start=start)


def _fetch_transfers(w3, plan: _ChainPlan) -> _ChainFetch:
    """The Transfer logs of known tokens to or from the accounts, from the oldest unindexed
    block of any of them to the newest confirmed one: two eth_getLogs per range, in one
    JSON-RPC batch. Network only (it runs in a thread of its own): no database here."""

    head = w3.eth.block_number
    if not isinstance(head, int):
        raise ChainAnswerError(f"eth_blockNumber answered {head!r}")
    fetched = _ChainFetch(latest=head - settings.HISTORY_CONFIRMATIONS)
    ours = {a.address.lower() for a in plan.accounts}
    topics = [_topic(a) for a in sorted(ours)]
    addresses = [Web3.to_checksum_address(a) for a in sorted(plan.tokens)]
    start = plan.start
    while start <= fetched.latest:
        end = min(fetched.latest, start + settings.HISTORY_LOG_CHUNK_BLOCKS - 1)
        base = {"fromBlock": start, "toBlock": end, "address": addresses}
        try:
            flows = _transfers_in_range(w3, base=base, topics=topics, tokens=plan.tokens)
        except CHAIN_RPC_ERRORS as exc:
            if not fetched.ranges:
                raise
            fetched.error = exc  # what was read so far is indexed; the rest next time
            break
        fetched.ranges.append((end, flows))
        start = end + 1
    return fetched


def _store_transfers(*, user, chain_id: int, plan: _ChainPlan, fetched: _ChainFetch) -> None:
    """Index what `_fetch_transfers` read, range by range (re-reading a log is harmless:
    unique on chain, tx, log index)."""
    for end, flows in fetched.ranges:
        rows = [TokenTransfer(chain_id=chain_id, **fields) for fields in flows]
        with transaction.atomic():
            TokenTransfer.objects.bulk_create(rows, ignore_conflicts=True)
            by_tx: dict[str, list[TokenTransfer]] = {}
            for row in rows:
                by_tx.setdefault(row.tx_hash, []).append(row)
            for tx_hash, tx_flows in sorted(by_tx.items()):
                HistoryEntry.objects.get_or_create(
                    user=user,
                    chain_id=chain_id,
                    tx_hash=tx_hash,
                    defaults={
                        "occurred_at": tx_flows[0].block_time,
                        "kind": _classify(tx_flows),
                    },
                )
            SmartAccount.objects.filter(
                pk__in=[a.pk for a in plan.accounts], history_synced_block__lt=end
            ).update(history_synced_block=end)


def _transfers_in_range(w3, *, base: dict, topics: list[str], tokens: dict) -> list[dict]:
    """The ERC-20 flows of one block range, as TokenTransfer fields. The node's answers are
    picked apart inside `node_answer`: a field it left out or sent with the wrong type is an
    unusable answer (reported like an outage), not a bug of ours."""

    with w3.batch_requests() as batch:
        batch.add(w3.eth.get_logs({**base, "topics": [TRANSFER_TOPIC, topics]}))
        batch.add(w3.eth.get_logs({**base, "topics": [TRANSFER_TOPIC, None, topics]}))
        sent, received = batch.execute()
    with node_answer("eth_getLogs"):
        logs = {(bytes(log["transactionHash"]), log["logIndex"]): log for log in sent + received}
        blocks = sorted({log["blockNumber"] for log in logs.values()})
    times = {}
    if blocks:
        with w3.batch_requests() as batch:
            for number in blocks:
                batch.add(w3.eth.get_block(number))
            answers = batch.execute()
        with node_answer("eth_getBlockByNumber"):
            times = {b["number"]: datetime.fromtimestamp(b["timestamp"], UTC) for b in answers}
    flows = []
    with node_answer("eth_getLogs"):
        for (tx_hash, index), log in logs.items():
            if len(log["topics"]) != 3 or len(bytes(log["data"])) != 32:
                continue  # an ERC-721 Transfer or a malformed log: not an ERC-20 flow
            flows.append(
                {
                    "tx_hash": "0x" + tx_hash.hex(),
                    "log_index": index,
                    "block_number": log["blockNumber"],
                    "block_time": times[log["blockNumber"]],
                    "token": tokens[log["address"].lower()],
                    "from_address": "0x" + bytes(log["topics"][1])[-20:].hex(),
                    "to_address": "0x" + bytes(log["topics"][2])[-20:].hex(),
                    "units": str(int.from_bytes(bytes(log["data"]), "big")),
                }
            )
    return flows


@transaction.atomic
def _sync_actions(*, user) -> None:
    """Executed actions join the history; one with a transaction enriches that tx's entry.
    An entry's occurred_at is never changed once written (it is the page key)."""
    pending = Action.objects.filter(
        user=user,
        status=ActionStatus.EXECUTED,
        history_entry__isnull=True,
        type__in=history_types(),
    ).order_by("executed_at", "pk")
    for action in pending:
        kind = kind_of(action.type).history_kind
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
    return parse_datetime(value) if isinstance(value, str) and value else None


def _sync_card_purchases(*, user) -> dict[str, Any]:
    """Card purchases from Gnosis Pay, with the JWT of the last passkey sign-in for the card's
    Safe (it lasts under an hour; without one we show what we synced before, and say so)."""

    cards = list(Card.objects.filter(user=user, is_virtual=False).order_by("pk"))
    if not cards:
        return {"syncedAt": None, "error": None}
    errors, synced = [], None
    client = gnosis_pay_client(timeout=settings.BUNDLER_TIMEOUT_SECONDS)
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


def history_sync(*, user, readers: Mapping[int, Any] | None = None) -> dict[str, Any]:
    """Bring the user's history up to date; each source that fails is reported, not fatal:
    what was indexed before is still served. Every chain of the table is read at once (one
    thread each, `read_chains`); each has its line in `chains`, and `chain` is the card's
    chain's line (the field this sync had when there was one chain)."""
    plans = {c.id: _plan_transfers(user=user, chain_id=c.id) for c in all_chains()}
    asked = [c for c in all_chains() if plans[c.id] is not None]
    outcomes, _ = read_chains(
        asked, lambda chain, w3: _fetch_transfers(w3, plans[chain.id]), readers=readers
    )
    lines = {}
    for outcome in outcomes:
        chain = outcome.chain
        fetched = outcome.value
        if fetched is not None:
            _store_transfers(user=user, chain_id=chain.id, plan=plans[chain.id], fetched=fetched)
            if fetched.error is not None:
                outcome.error = chain_error(chain, fetched.error)
        if outcome.error:
            logger.warning("history sync of user %s: %s", user.pk, outcome.error)
        synced = fetched.latest if fetched is not None and fetched.error is None else None
        lines[chain.id] = outcome.entry(syncedToBlock=synced)
    chains = [lines.get(c.id) or ChainOutcome(c).entry(syncedToBlock=None) for c in all_chains()]
    card = next(line for line in chains if line["chainId"] == settings.CARD_CHAIN_ID)
    _sync_actions(user=user)
    cards = _sync_card_purchases(user=user)
    return {
        "chain": {k: card[k] for k in ("chainId", "syncedToBlock", "error")},
        "chains": chains,
        "gnosisPay": cards,
    }
