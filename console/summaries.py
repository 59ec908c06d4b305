"""The support console's counts and charts (the home's top): per lifecycle, its unfinished
rows by status, its table's size and its transitions per hour over the last 24 hours."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache as django_cache
from django.db import connections
from django.db.models import Count
from django.db.models.functions import TruncHour
from django.utils import timezone

from core.lifecycle import Lifecycle, lifecycles


@dataclass
class KindSummary:
    name: str
    admin_url: str
    label: str
    open_counts: list[tuple[str, int]]  # each unfinished status, counted up to COUNT_CAP
    total: str  # the table's size ("about N" on PostgreSQL: its estimate)
    hours: list[tuple[datetime, int, int]]  # (hour, transitions, of which to a failure)


COUNT_CAP = 10_000
FAILURES = {"failed", "unknown", "expired", "rejected", "cancelled"}


def _table_total(model) -> str:
    connection = connections[model.objects.db]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                [model._meta.db_table],
            )
            estimate = cursor.fetchone()[0]
        if estimate > COUNT_CAP:
            return f"about {estimate:,}"
    return f"{model.objects.count():,}"


def summaries_cached() -> tuple[list[KindSummary], datetime]:
    """`summaries()` as of at most CONSOLE_SUMMARY_CACHE_SECONDS ago (the home's fixed cost:
    a few GROUP BYs), with the instant it was computed."""
    seconds = settings.CONSOLE_SUMMARY_CACHE_SECONDS
    if seconds:
        hit = django_cache.get("console:summaries")
        if hit is not None:
            return hit
    value = (summaries(), timezone.now())
    if seconds:
        django_cache.set("console:summaries", value, seconds)
    return value


def summaries(now: datetime | None = None) -> list[KindSummary]:
    """Per lifecycle: unfinished rows by status (one GROUP BY over the status index, the
    unfinished statuses only), the table's size, and transitions per hour over the last 24 h
    (one GROUP BY date_trunc('hour') over the history's timestamp index)."""
    now = now or timezone.now()
    start = (now - timedelta(hours=23)).replace(minute=0, second=0, microsecond=0)
    result = []
    for lifecycle in lifecycles():
        model, field = lifecycle.model, lifecycle.status_field
        open_statuses = [
            value
            for value, _ in model._meta.get_field(field).choices
            if value not in lifecycle.terminal
        ]
        counted = dict(
            model.objects.filter(**{f"{field}__in": open_statuses})
            .order_by()
            .values_list(field)
            .annotate(n=Count("pk"))
        )
        by_hour = _transitions_by_hour(lifecycle, start, now)
        hours = []
        for i in range(24):
            hour = start + timedelta(hours=i)
            total, failed = by_hour.get(hour, (0, 0))
            hours.append((hour, total, failed))
        result.append(
            KindSummary(
                name=lifecycle.name,
                admin_url=lifecycle.admin_url(),
                label=str(model._meta.verbose_name_plural),
                open_counts=[(s, counted.get(s, 0)) for s in open_statuses],
                total=_table_total(model),
                hours=hours,
            )
        )
    return result


# An hour ended this long ago takes no more transitions (one committed late is in it).
HOUR_SETTLED = timedelta(minutes=1)


def _transitions_by_hour(lifecycle: Lifecycle, start: datetime, now: datetime) -> dict:
    """{hour: [transitions, of which to a failure]} from `start` on. With the summary cache
    on, an hour that has ended is read once and then kept (it no longer changes): a refresh
    reads the hour in progress, not 24 hours of history (40 ms at the bench's rate, paid by
    whichever page found the summaries expired)."""
    seconds = settings.CONSOLE_SUMMARY_CACHE_SECONDS
    zone = timezone.get_current_timezone_name()  # TruncHour's hours are the zone's
    ended = [start + timedelta(hours=i) for i in range(24)]
    ended = [hour for hour in ended if hour + timedelta(hours=1) <= now - HOUR_SETTLED]
    keys = {f"console:hour:{lifecycle.name}:{zone}:{hour.isoformat()}": hour for hour in ended}
    kept = django_cache.get_many(list(keys)) if seconds else {}
    by_hour = {keys[key]: list(value) for key, value in kept.items()}
    missing = [hour for hour in ended if hour not in by_hour]
    since = missing[0] if missing else start + timedelta(hours=len(ended))
    read: dict[datetime, list[int]] = {}
    for hour, status, n in (
        lifecycle.history_model.objects.filter(timestamp__gte=since)
        .annotate(hour=TruncHour("timestamp"))
        .order_by()
        .values_list("hour", "status")
        .annotate(n=Count("pk"))
    ):
        slot = read.setdefault(hour, [0, 0])
        slot[0] += n
        if status in FAILURES:
            slot[1] += n
    if seconds and missing:
        fresh = {key: read.get(hour, [0, 0]) for key, hour in keys.items() if hour in missing}
        django_cache.set_many(fresh, timeout=25 * 3600)
    return by_hour | read
