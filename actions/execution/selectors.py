"""Reads from the database only: no network I/O, no JSON shapes (chain reads are in
chain_reads.py, payloads in presenters.py)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connections
from django.db.models import Aggregate, F, JSONField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import JSONObject, Lower
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from actions.accounts.models import Passkey
from actions.errors import ActionAccessDenied, ActionNotFound
from actions.execution.models import (
    IN_FLIGHT,
    PENDING_ON_CHAIN,
    Action,
    ActionStatus,
    ActionStatusHistory,
)
from core.echo import named


def actions_of_account(queryset: QuerySet[Action], address: str) -> QuerySet[Action]:
    """The actions of `queryset` on the smart account `address`, however either is spelled
    (lowercase or EIP-55): LOWER(smart_account) as the index action_account_created has it,
    with the lists' order (newest first) after it, so a page of an account's actions reads
    that page."""
    return queryset.alias(account_lower=Lower("smart_account")).filter(
        account_lower=address.lower()
    )


def retention_cutoff(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(hours=settings.ACTION_RETENTION_HOURS)


def action_get_for_client(
    *, action_id: str, user, application, now: datetime | None = None
) -> Action:
    """The action as its creator (user + OAuth client) may see it, with the seed's errors."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        raise ActionNotFound(f"Action not found: {named(action_id)}") from None
    action = Action.objects.filter(pk=pk, created_at__gte=retention_cutoff(now)).first()
    if action is None:
        raise ActionNotFound(f"Action not found: {named(action_id)}")
    _check_client(action, action_id=action_id, user=user, application=application)
    return action


def _check_client(action: Action, *, action_id, user, application) -> None:
    # Ids only: neither the user nor the application row is needed to compare them.
    if action.user_id != user.pk:
        raise ActionAccessDenied("Action does not belong to the authenticated user")
    if application is None or action.application_id != application.pk:
        raise ActionAccessDenied("Action belongs to a different OAuth client")


def action_with_history(*, action_id) -> Action:
    return (
        Action.objects.select_related("spend_permission")
        .prefetch_related("history")
        .get(pk=action_id)
    )


class _JSONArrayAgg(Aggregate):
    """The rows of a group as one JSON array (jsonb_agg on PostgreSQL, json_group_array on
    SQLite); order is not guaranteed, callers sort."""

    function = "JSONB_AGG"
    output_field = JSONField()

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, function="JSON_GROUP_ARRAY", **extra)


def _history_as_json():
    rows = (
        ActionStatusHistory.objects.filter(action=OuterRef("pk"))
        .order_by()
        .values("action")
        .annotate(
            rows=_JSONArrayAgg(
                JSONObject(
                    id="id",
                    from_status="from_status",
                    status="status",
                    timestamp="timestamp",
                    detail="detail",
                )
            )
        )
        .values("rows")
    )
    return Subquery(rows, output_field=JSONField())


@dataclass(frozen=True, slots=True)
class StatusRow:
    """One history row as get_action_status shows it: the fields the answer reads, without a
    model instance per row (building five of them was a third of the view's CPU)."""

    id: int
    from_status: str | None
    status: str
    timestamp: datetime
    detail: str | None


def _history_row(row: dict) -> StatusRow:
    timestamp = parse_datetime(row["timestamp"])
    if timezone.is_naive(timestamp):  # SQLite stores UTC without an offset
        timestamp = timezone.make_aware(timestamp, UTC)
    return StatusRow(row["id"], row["from_status"], row["status"], timestamp, row["detail"])


_SENTINEL_PK = uuid.UUID(int=0x5E17)
_SENTINEL_CUTOFF = datetime(1970, 1, 2, tzinfo=UTC)
_status_sql: dict[str, tuple] = {}


def _status_query(*, pk: uuid.UUID, cutoff: datetime) -> tuple[str, list, list, dict]:
    """get_action_status's statement: the action (without its two largest columns, which the
    answer does not show) and its history as one JSON array. Compiled once per database and
    reused with this request's id and retention cutoff: compiling it cost more CPU than
    running it."""
    connection = connections[Action.objects.db]
    fields = Action._meta
    prepare_pk = fields.pk.get_db_prep_value
    prepare_cutoff = fields.get_field("created_at").get_db_prep_value
    if connection.alias not in _status_sql:
        query = (
            Action.objects.filter(pk=_SENTINEL_PK, created_at__gte=_SENTINEL_CUTOFF)
            .order_by()
            .defer("params", "user_op")
            # The permission that signed it, by name (get_action_status says which).
            .annotate(spend_permission_name=F("spend_permission__name"))
            .annotate(history_rows=_history_as_json())
        )
        compiler = query.query.get_compiler(connection.alias)
        sql, params = compiler.as_sql()
        params = tuple(params)
        pk_at = params.index(prepare_pk(_SENTINEL_PK, connection))
        cutoff_at = params.index(prepare_cutoff(_SENTINEL_CUTOFF, connection))
        # What each selected column is (a field's attribute name, or the annotation's alias)
        # and its converters: the row becomes an instance without a RawQuerySet's per-query
        # work of mapping columns to fields.
        columns = [select[2] or select[0].target.attname for select in compiler.select]
        if columns[-2:] != ["spend_permission_name", "history_rows"]:
            raise RuntimeError(f"get_action_status's statement ends with {columns[-2:]}")
        converters = compiler.get_converters([select[0] for select in compiler.select])
        _status_sql[connection.alias] = (sql, params, pk_at, cutoff_at, columns, converters)
    sql, params, pk_at, cutoff_at, columns, converters = _status_sql[connection.alias]
    values = list(params)
    values[pk_at] = prepare_pk(pk, connection)
    values[cutoff_at] = prepare_cutoff(cutoff, connection)
    return sql, values, columns, converters


def action_status_statement(*, action_id, now: datetime | None = None) -> tuple[str, list] | None:
    """get_action_status's statement and its values, for the view to run with its token read
    (`core.token_reads`); None for an id that is not a UUID (not found without a query)."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        return None
    sql, params, _columns, _converters = _status_query(pk=pk, cutoff=retention_cutoff(now))
    return sql, params


_UNREAD = object()


def action_status_for_client(
    *, action_id: str, user, application, now: datetime | None = None, row=_UNREAD
) -> Action:
    """`action_get_for_client` with the status history read in the same statement (a JSON
    aggregate), for get_action_status: one query instead of the action, then its history.
    `row` is that statement's row (None: no row) when it was already read with the token."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        raise ActionNotFound(f"Action not found: {named(action_id)}") from None
    sql, params, columns, converters = _status_query(pk=pk, cutoff=retention_cutoff(now))
    connection = connections[Action.objects.db]
    if row is _UNREAD:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
    if row is None:
        raise ActionNotFound(f"Action not found: {named(action_id)}")
    row = list(row)
    for index, (functions, expression) in converters.items():
        for convert in functions:
            row[index] = convert(row[index], expression, connection)
    # The model's columns, then the two annotations (checked when compiled).
    action = Action.from_db(connection.alias, columns[:-2], row[:-2])
    action.spend_permission_name, action.history_rows = row[-2:]
    _check_client(action, action_id=action_id, user=user, application=application)
    history = action.history_rows
    if isinstance(history, str | bytes):  # a raw query leaves JSON undecoded
        history = json.loads(history)
    rows = [_history_row(row) for row in history or []]
    rows.sort(key=lambda row: (row.timestamp, row.id))  # the history's own ordering
    action.preloaded_history = rows
    return action


def actions_pending_on_chain(*, limit: int, now: datetime | None = None) -> QuerySet[Action]:
    """What reconciliation follows: submitted/broadcast actions (user operations, card actions
    awaiting Gnosis Pay or the delay module) and signed ones whose submission never started,
    least recently reconciled first, so batches rotate."""
    grace = (now or timezone.now()) - timedelta(seconds=settings.ACTIONS_SUBMIT_GRACE_SECONDS)
    return Action.objects.filter(
        Q(status__in=PENDING_ON_CHAIN) | Q(status=ActionStatus.SIGNED, signed_at__lt=grace)
    ).order_by(F("last_reconciled_at").asc(nulls_first=True), "created_at")[:limit]


def actions_stuck(*, minutes: int | None = None, now: datetime | None = None) -> QuerySet[Action]:
    """Signed more than ACTIONS_STUCK_AFTER_MINUTES ago and still not ended: staff look.

    Measured from the signature, not from the last change, so an action whose error keeps
    changing (re-sends) still counts as stuck."""
    minutes = minutes or settings.ACTIONS_STUCK_AFTER_MINUTES
    cutoff = (now or timezone.now()) - timedelta(minutes=minutes)
    return Action.objects.filter(status__in=IN_FLIGHT, signed_at__lt=cutoff)


def actions_for_user(*, user, limit: int = 20, now: datetime | None = None) -> list[Action]:
    """The front door's activity, with the agent: what waits for the user's approval first
    (the nearest deadline first), then the rest newest first. Two queries whatever the rows;
    a `proposed` past its deadline is among the rest (the caller expires it)."""
    now = now or timezone.now()
    mine = Action.objects.filter(user=user).select_related("application")
    waiting = list(
        mine.filter(status=ActionStatus.PROPOSED, expires_at__gt=now).order_by(
            "expires_at", "-created_at"
        )[:limit]
    )
    rest = mine.exclude(status=ActionStatus.PROPOSED, expires_at__gt=now).order_by("-created_at")
    return waiting + list(rest[: limit - len(waiting)])


SIGNED_WITH = "signed with passkey "


def action_signer(action: Action) -> Passkey | None:
    """The passkey that signed `action`, named by its `signed` history row."""
    row = (
        ActionStatusHistory.objects.filter(action=action, status=ActionStatus.SIGNED)
        .exclude(from_status=ActionStatus.SIGNED)
        .values_list("detail", flat=True)
        .first()
    )
    if not row or not row.startswith(SIGNED_WITH):
        return None
    prefix = row[len(SIGNED_WITH) :].split("…", 1)[0]
    if not prefix:
        return None
    return Passkey.objects.filter(user_id=action.user_id, credential_id__startswith=prefix).first()
