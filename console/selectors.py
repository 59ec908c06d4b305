"""What the support console reads, across the three apps, through the lifecycle registry and
each app's public face (its stuck-work and search providers).

Every query is bounded (LIMIT) and served by an index: the status indexes, (status, updated_at)
on actions, (status, created_at) on deliveries, (billing_status, created_at) on operations,
the history tables' timestamp and trace_id, and each exact id column."""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache, partial, reduce
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from actions import public as actions
from core.admin import search_term_kind, user_ids_matching
from core.lifecycle import Lifecycle, lifecycle_named, lifecycles
from core.permissions import may_view
from messaging import public as messaging
from operations import public as operations

# Each source of the needs-attention list and of a search reads at most this many rows; the
# page says "more than N" when one was cut.
LIMIT = 200
KINDS = ("action", "delivery", "operation", "accountChange", "spendPermission")


_SAMPLE = "00000000-0000-4000-8000-000000000000"


@cache
def _url(kind: str, which: str) -> str:
    """A kind's timeline or admin URL for a sample id, reversed once: a row substitutes its
    id (reverse() per row was a tenth of a long list's render)."""
    lifecycle = lifecycle_named(kind)
    if which == "timeline":
        return lifecycle.timeline_url(_SAMPLE) or ""
    return lifecycle.admin_url(_SAMPLE)


@dataclass(frozen=True)
class Row:
    """One piece of work as the console lists it, whatever its kind."""

    kind: str
    id: str
    status: str
    since: datetime  # its last change: the age is measured from here
    created_at: datetime
    owner: str
    error: str
    why: str  # why it is listed (stuck, failed recently, needs review…) or how it was found
    chain_id: int | None = None  # an action's chain (shown by name, core.chains)
    tx_hash: str = ""  # an action's transaction (linked to the chain's explorer, if any)
    outcome: str = ""  # an executed swap's bridge outcome when not completed (refunded…)

    @property
    def lifecycle(self) -> Lifecycle:
        return lifecycle_named(self.kind)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.id}"

    @property
    def timeline_url(self) -> str | None:
        return _url(self.kind, "timeline").replace(_SAMPLE, self.id) if self.timeline_ok else None

    @property
    def timeline_ok(self) -> bool:
        return self.lifecycle.timeline_url_name is not None

    @property
    def admin_url(self) -> str:
        return _url(self.kind, "admin").replace(_SAMPLE, self.id)

    def age(self, now: datetime) -> timedelta:
        return now - self.since


def _printable(value: str) -> str:
    value = value.strip()
    return value if "\x00" not in value else ""


@dataclass(frozen=True)
class Filters:
    kind: str = ""
    status: str = ""
    older: int | None = None  # minutes since the last change
    owner: str = ""

    @classmethod
    def from_query(cls, query) -> Filters:
        kind = query.get("kind", "")
        older = query.get("older", "").strip()
        return cls(
            kind=kind if kind in KINDS else "",
            # A NUL can be in no status or name (and PostgreSQL refuses it): no filter.
            status=_printable(query.get("status", "")),
            # ASCII digits, at most 7 (19 years): anything else is no filter, never a 500.
            older=int(older) if re.fullmatch(r"[0-9]{1,7}", older) else None,
            owner=_printable(query.get("owner", "")),
        )

    def as_query(self) -> dict[str, str]:
        values = {"kind": self.kind, "status": self.status, "owner": self.owner}
        values["older"] = "" if self.older is None else str(self.older)
        return {k: v for k, v in values.items() if v}


@dataclass
class Listing:
    rows: list[Row]  # oldest change first: all of them, or the `shown` oldest when asked
    cut: list[str]  # the kinds whose source had more than `limit` rows
    limit: int = 0
    count: int = 0  # the rows the list holds (each kind counted up to `limit`)


def _action_row(action, why: str) -> Row:
    return Row(
        kind="action",
        id=str(action.pk),
        status=action.status,
        since=action.updated_at,
        created_at=action.created_at,
        owner=action.user.username,
        error=action.error or action.last_reconcile_error or "",
        why=why,
        chain_id=action.chain_id,
        tx_hash=action.tx_hash or "",
        outcome=actions.listed_bridge_outcome(action),
    )


def _account_record_row(kind: str, record, why: str) -> Row:
    """An account change's or a spend permission's row: the same fields, another kind."""
    return Row(
        kind=kind,
        id=str(record.pk),
        status=record.status,
        since=record.updated_at,
        created_at=record.created_at,
        owner=record.user.username,
        error=record.error or "",
        why=why,
    )


_account_change_row = partial(_account_record_row, "accountChange")
_spend_permission_row = partial(_account_record_row, "spendPermission")


def _delivery_row(delivery, why: str) -> Row:
    return Row(
        kind="delivery",
        id=str(delivery.pk),
        status=delivery.status,
        since=delivery.updated_at,
        created_at=delivery.created_at,
        owner=delivery.created_by.username,
        error=delivery.reason or delivery.last_error or "",
        why=why,
    )


def _operation_row(operation, why: str) -> Row:
    error = operation.last_error or operation.error_code or ""
    if not error and operation.review:
        error = f"review: rule {operation.review.get('rule')}"
    return Row(
        kind="operation",
        id=str(operation.pk),
        status=operation.state,
        since=operation.updated_at,
        created_at=operation.created_at,
        owner=operation.owner.username,
        error=error,
        why=why,
    )


def _narrowing(kind: str, *, filters: Filters, owners: list[int] | None, now: datetime) -> Q:
    """The page's filters on a kind's rows (`owners`: the users the owner filter matched)."""
    narrowing = Q()
    if filters.status:
        narrowing &= Q(**{lifecycle_named(kind).status_field: filters.status})
    if filters.older is not None:
        narrowing &= Q(updated_at__lt=now - timedelta(minutes=filters.older))
    if owners is not None:
        narrowing &= Q(**{f"{_OWNER[kind]}__in": owners})
    return narrowing


def _bounded(queryset: QuerySet, order: str) -> tuple[list, bool]:
    found = list(queryset.order_by(order)[: LIMIT + 1])
    return found[:LIMIT], len(found) > LIMIT


def hold_cutoff(now: datetime) -> datetime:
    return now - timedelta(minutes=settings.CONSOLE_HOLD_STUCK_MINUTES)


def attention_sources(now: datetime) -> dict[str, tuple[tuple[QuerySet, ...], Any]]:
    """Each kind's "needs attention" querysets (its app's provider: one, or a few whose rows
    are listed together), and its row with why it is in it."""
    sources = {
        "action": (actions.actions_needing_attention(now=now), _action_row),
        "delivery": (messaging.deliveries_needing_attention(now=now), _delivery_row),
        "operation": (
            operations.operations_needing_attention(now=now, hold_cutoff=hold_cutoff(now)),
            _operation_row,
        ),
        "accountChange": (
            actions.account_changes_needing_attention(now=now),
            _account_change_row,
        ),
        "spendPermission": (
            actions.spend_permissions_needing_attention(now=now),
            _spend_permission_row,
        ),
    }
    return {
        kind: (
            tuple(branch.select_related(_OWNER[kind]) for branch in found),
            lambda item, why=why, to_row=to_row: to_row(item, why(item)),
        )
        for kind, ((found, why), to_row) in sources.items()
    }


_OWNER = {
    "action": "user",
    "delivery": "created_by",
    "operation": "owner",
    "accountChange": "user",
    "spendPermission": "user",
}
# What a row shows: loading only these skips the JSON columns (params, user operation,
# input, result), a third of a long list's cost.
_SHOWN_FIELDS = {
    "action": ("status", "error", "last_reconcile_error", "chain_id", "tx_hash", "user__username"),
    "delivery": ("status", "reason", "last_error", "created_by__username"),
    "operation": ("state", "last_error", "error_code", "review", "owner__username"),
    "accountChange": ("status", "error", "user__username"),
    "spendPermission": ("status", "error", "user__username"),
}


# The needs-attention list also says why a bridge is listed (its leg, read in the same join).
_ATTENTION_FIELDS = {
    "action": (
        "executed_at",
        "bridge_leg__status",
        "bridge_leg__substatus",
        "bridge_leg__deadline",
    ),
    "delivery": (),
    "operation": (),
    "accountChange": (),
    "spendPermission": (),
}


def _only(kind: str, queryset: QuerySet, extra: tuple[str, ...] = ()) -> QuerySet:
    return queryset.only("pk", "created_at", "updated_at", *_SHOWN_FIELDS[kind], *extra)


def viewable_kinds(user) -> frozenset[str]:
    """The kinds of work this staff member may view (the model's view or change permission,
    as the admin reads them)."""
    return frozenset(lc.name for lc in lifecycles() if may_view(user, lc.model))


def needs_attention(
    filters: Filters,
    now: datetime | None = None,
    kinds: frozenset[str] = frozenset(KINDS),
    shown: int | None = None,
) -> Listing:
    """Oldest change first, each kind's source read up to LIMIT + 1 rows; only `kinds`.

    With `shown`, only the `shown` oldest of them are read whole: each kind's ids and times
    first (up to LIMIT + 1: the count and the cut), then the rows shown by primary key. A page
    then builds and draws the same rows whether a kind holds 70 or its 201, so its work does
    not grow with the items waiting (it did, 1.3-1.5x, from 1M to 10M rows per app)."""
    now = now or timezone.now()
    owners = user_ids_matching(filters.owner) if filters.owner else None
    sources = {}
    for kind, (branches, to_row) in attention_sources(now).items():
        if (filters.kind and filters.kind != kind) or kind not in kinds:
            continue
        narrowing = _narrowing(kind, filters=filters, owners=owners, now=now)
        sources[kind] = (
            tuple(
                _only(kind, branch.filter(narrowing), _ATTENTION_FIELDS[kind])
                for branch in branches
            ),
            to_row,
        )
    if shown is None:
        return _read_whole(sources)
    keys: list[tuple[datetime, str, Any]] = []
    cut: list[str] = []
    for kind, (branches, _) in sources.items():
        found, more = _bounded(_times_and_keys(branches), "updated_at")
        keys.extend((since, kind, pk) for since, pk in found)
        if more:
            cut.append(kind)
    keys.sort(key=lambda key: key[0])  # stable: kinds in KINDS order on a tie, as before
    wanted: dict[str, list] = {}
    for _, kind, pk in keys[:shown]:
        wanted.setdefault(kind, []).append(pk)
    read = {}
    for kind, pks in wanted.items():
        read |= {(kind, item.pk): item for item in _by_pk(sources[kind][0][0], pks)}
    # A row changed between the two reads (it may have left the list) is not shown.
    rows = [
        sources[kind][1](item)
        for since, kind, pk in keys[:shown]
        if (item := read.get((kind, pk))) is not None and item.updated_at == since
    ]
    return Listing(rows=rows, cut=cut, limit=LIMIT, count=len(keys))


def _by_pk(queryset: QuerySet, pks: list) -> QuerySet:
    """The rows of `queryset` with these primary keys, read by them alone: the list's
    condition was the first read's (a row changed since shows a new `updated_at`). With it
    in the WHERE too, the planner read every waiting row of the kind to keep the page's."""
    by_pk = queryset.all()
    by_pk.query.clear_where()
    return by_pk.filter(pk__in=pks)


def _times_and_keys(branches: tuple[QuerySet, ...]) -> QuerySet:
    """(updated_at, pk) of a kind's rows. Several querysets are read each in that order up to
    LIMIT + 1 and merged (UNION): as one OR, PostgreSQL read every row of every branch and
    sorted them (the in-flight actions: 0.9 ms at 1M rows, 4.8 ms at 10M)."""
    reads = [branch.values_list("updated_at", "pk") for branch in branches]
    if (
        len(reads) == 1
        or not connections[reads[0].db].features.supports_slicing_ordering_in_compound
    ):
        # SQLite takes no LIMIT inside a UNION: one OR, as before (the embedded default's rows).
        return reduce(operator.or_, reads)
    first, *rest = (read.order_by("updated_at")[: LIMIT + 1] for read in reads)
    return first.union(*rest)


def _read_whole(sources: dict[str, tuple[tuple[QuerySet, ...], Any]]) -> Listing:
    """Every row of the list (the CSV), each kind's querysets read whole in one statement each:
    the oldest LIMIT + 1 of each are enough to find the kind's oldest LIMIT + 1."""
    rows: list[Row] = []
    cut: list[str] = []
    for kind, (branches, to_row) in sources.items():
        found = {}
        for branch in branches:
            found |= {item.pk: item for item in branch.order_by("updated_at")[: LIMIT + 1]}
        oldest = sorted(found.values(), key=lambda item: item.updated_at)
        rows.extend(to_row(item) for item in oldest[:LIMIT])
        if len(oldest) > LIMIT:
            cut.append(kind)
    rows.sort(key=lambda row: row.since)
    return Listing(rows=rows, cut=cut, limit=LIMIT, count=len(rows))


# --- Search ------------------------------------------------------------------------------------


@dataclass
class SearchResult:
    term: str
    tried: list[str]
    rows: list[Row]  # in the order found: all of them, or the `shown` first when asked
    quotes: list[Any]  # unused quotes with the id searched for
    cut: bool
    limit: int = 0
    found: int = 0  # the rows found (each lookup read up to `limit`)

    @property
    def count(self) -> int:
        """What the page's "N found" says: the rows and the unused quotes."""
        return self.found + len(self.quotes)


_TO_ROW = {
    "action": _action_row,
    "delivery": _delivery_row,
    "operation": _operation_row,
    "accountChange": _account_change_row,
    "spendPermission": _spend_permission_row,
}


def _rows(kind: str, queryset: QuerySet, why: str) -> tuple[list[Row], bool]:
    related = _OWNER[kind]
    found, more = _bounded(_only(kind, queryset.select_related(related)), "-created_at")
    return [_TO_ROW[kind](item, why) for item in found], more


def _rows_by_key(keys: list[tuple[str, Any, str]]) -> list[Row]:
    """The rows of (kind, pk, why) keys, in their order: one query per kind."""
    wanted: dict[str, list] = {}
    for kind, pk, _ in keys:
        wanted.setdefault(kind, []).append(pk)
    read = {}
    for kind, pks in wanted.items():
        model = lifecycle_named(kind).model
        queryset = _only(kind, model.objects.filter(pk__in=pks).select_related(_OWNER[kind]))
        read |= {(kind, item.pk): item for item in queryset}
    # A row deleted between the two reads is not shown.
    return [_TO_ROW[kind](read[kind, pk], why) for kind, pk, why in keys if (kind, pk) in read]


_TRACE_ID = 32  # W3C trace id: 32 lowercase hex digits


def search(
    term: str, kinds: frozenset[str] = frozenset(KINDS), shown: int | None = None
) -> SearchResult:
    """Exact, indexed lookups by the term's shape (core.admin.search_term_kind), over the
    kinds of work in `kinds` only. With `shown`, each lookup reads its ids (up to LIMIT + 1,
    newest first) and only the first `shown` rows found are read whole (see needs_attention)."""
    kind, value = search_term_kind(term)
    term = term.strip()
    lookups: list[tuple[str, str, QuerySet]] = []
    quotes: list[Any] = []
    tried: list[str] = []
    if kind == "uuid":
        quotes = operations.quotes_unused(quote_id=value)
        tried.append("quote id")
    elif kind == "text" and term:
        tried.append("username or e-mail")
    # Each app's exact lookups for the term's shape, in the order of KINDS.
    for name, provider in (
        ("action", actions.actions_search),
        ("delivery", messaging.deliveries_search),
        ("operation", operations.operations_search),
        ("accountChange", actions.account_changes_search),
        ("spendPermission", actions.spend_permissions_search),
    ):
        lookups += [(name, what, qs) for what, qs in provider(shape=kind, value=value, term=term)]
    if kind == "text" and term and (users := user_ids_matching(term)):
        for name in KINDS:
            owned = lifecycle_named(name).model.objects.filter(**{f"{_OWNER[name]}__in": users})
            lookups.append((name, "owner", owned))
    lowered = term.lower()
    # A trace id is 32 hex digits, which also parses as a dash-less uuid: tried either way.
    if len(lowered) == _TRACE_ID and all(c in "0123456789abcdef" for c in lowered):
        for lifecycle in lifecycles():
            history = lifecycle.history_model.objects.filter(trace_id=lowered)
            # The ids first, on the trace_id index (no ORDER BY nor DISTINCT: either made the
            # planner walk another index, 2 s at 1M rows), then the entities by primary key.
            ids = set(history.order_by().values_list(lifecycle.history_fk, flat=True)[:LIMIT])
            lookups.append(
                (
                    lifecycle.name,
                    "request id (trace id)",
                    lifecycle.model.objects.filter(pk__in=ids),
                )
            )
    rows: list[Row] = []
    keys: list[tuple[str, Any, str]] = []
    cut = False
    seen: set = set()
    for kind_name, what, queryset in lookups:
        if kind_name not in kinds:
            continue
        if what not in tried:
            tried.append(what)
        if shown is None:
            found, more = _rows(kind_name, queryset, f"by {what}")
            for row in found:
                if row.key not in seen:
                    seen.add(row.key)
                    rows.append(row)
        else:
            pks, more = _bounded(queryset.values_list("pk", flat=True), "-created_at")
            for pk in pks:
                if (kind_name, pk) not in seen:
                    seen.add((kind_name, pk))
                    keys.append((kind_name, pk, f"by {what}"))
        cut |= more
    if shown is not None:
        rows = _rows_by_key(keys[:shown])
    return SearchResult(
        term=term,
        tried=tried,
        rows=rows,
        quotes=quotes,
        cut=cut,
        limit=LIMIT,
        found=len(rows) if shown is None else len(keys),
    )


def rows_for_keys(
    keys: Iterable[str], kinds: frozenset[str] = frozenset(KINDS)
) -> Iterator[tuple[str, Any]]:
    """The entities named "kind:id" (the bulk form's checkboxes), one query per kind; a key of
    a kind outside `kinds` (one the staff member may not view) names nothing."""
    wanted: dict[str, list[str]] = {}
    hidden: list[str] = []
    for key in keys:
        kind, _, pk = key.partition(":")
        if kind in KINDS and pk:
            if kind in kinds:
                wanted.setdefault(kind, []).append(pk)
            else:
                hidden.append(key)
    for kind, pks in wanted.items():
        model = lifecycle_named(kind).model
        valid = []
        for pk in pks:
            try:
                valid.append(model._meta.pk.to_python(pk))
            except ValidationError:  # a malformed id names nothing
                continue
        related = _OWNER[kind]
        found = {
            str(item.pk): item
            for item in model.objects.filter(pk__in=valid[:LIMIT]).select_related(related)
        }
        for pk in pks:
            yield f"{kind}:{pk}", found.get(pk)
    for key in hidden:
        yield key, None
