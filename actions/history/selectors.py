"""The transaction history, a page at a time (get_transactions), behind an opaque cursor."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.utils.dateparse import parse_datetime

from actions.accounts.models import SmartAccount
from actions.errors import InvalidCursor
from actions.history.models import HistoryEntry, TokenTransfer
from core import json_input


def encode_cursor(entry: HistoryEntry) -> str:
    raw = json.dumps({"t": entry.occurred_at.isoformat(), "id": entry.pk}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        data = json_input.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        when, pk = parse_datetime(data["t"]), int(data["id"])
    except (ValueError, KeyError, TypeError, binascii.Error, json_input.BodyRefused):
        raise InvalidCursor(f"Invalid cursor: {cursor[:40]}") from None
    if when is None or when.tzinfo is None:
        raise InvalidCursor(f"Invalid cursor: {cursor[:40]}")
    return when, pk


@dataclass(frozen=True)
class HistoryPage:
    entries: list[HistoryEntry]
    more: bool
    # (chain id, tx hash) → the TokenTransfers of that tx that touch `ours`, by log index
    transfers: dict[tuple[int, str], list[TokenTransfer]]
    ours: set[str]  # the user's account addresses, lowercase


def history_page(*, user, cursor: str | None = None, limit: int = 20) -> HistoryPage:
    """A page of the user's history, newest first, keyset-paginated on (occurred_at, id): the
    cursor names the last entry shown, so entries added later (always newer, or merged into an
    existing line) never shift or repeat what the next page holds."""
    entries = HistoryEntry.objects.filter(user=user).select_related(
        "action",
        "action__bridge_leg",  # a cross-chain swap's destination leg (received amount, tx)
        "card_purchase",
        "card_purchase__card",
        "card_purchase__card__token",
        "card_purchase__card__physical__token",
    )
    if cursor:
        when, pk = _decode_cursor(cursor)
        entries = entries.filter(Q(occurred_at__lt=when) | Q(occurred_at=when, pk__lt=pk))
    page = list(entries.order_by("-occurred_at", "-pk")[: limit + 1])
    more, page = len(page) > limit, page[:limit]
    ours = {
        a.lower() for a in SmartAccount.objects.filter(user=user).values_list("address", flat=True)
    }
    transfers: dict[tuple[int, str], list] = {}
    keys = {(e.chain_id, e.tx_hash) for e in page if e.tx_hash}
    if keys:
        found = TokenTransfer.objects.filter(tx_hash__in={h for _, h in keys}).select_related(
            "token", "token__vault_asset"
        )
        for t in found.order_by("log_index"):
            if t.from_address in ours or t.to_address in ours:
                transfers.setdefault((t.chain_id, t.tx_hash), []).append(t)
    return HistoryPage(entries=page, more=more, transfers=transfers, ours=ours)
