"""The scrape-time gauges of the lifecycle registry: per kind of work, its non-terminal items
by status, the age of the oldest, and its stuck count. CoreConfig.ready() registers them into
core.metrics (which knows no lifecycle)."""

from __future__ import annotations

from django.db.models import Count, Min
from django.utils import timezone
from django.utils.module_loading import import_string
from prometheus_client.core import GaugeMetricFamily

from core.lifecycle import lifecycles


def lifecycle_families() -> list[GaugeMetricFamily]:
    """Per lifecycle: one GROUP BY over its non-terminal statuses (count and oldest
    `created_at`) and one stuck count: 2 × lifecycles queries, each answered from an index on
    the status (non-terminal rows are few)."""
    items = GaugeMetricFamily(
        "picnic_lifecycle_items",
        "Non-terminal items per lifecycle and status.",
        labels=["lifecycle", "status"],
    )
    oldest = GaugeMetricFamily(
        "picnic_lifecycle_oldest_age_seconds",
        "Age (now - created_at) of the oldest non-terminal item per lifecycle and status; "
        "0 when there is none.",
        labels=["lifecycle", "status"],
    )
    stuck = GaugeMetricFamily(
        "picnic_lifecycle_stuck_items",
        "Items matching the lifecycle's own 'stuck' definition (what staff must look at).",
        labels=["lifecycle"],
    )
    now = timezone.now()
    for lifecycle in lifecycles():
        open_statuses = sorted(set(lifecycle.moves) - lifecycle.terminal)
        field = lifecycle.status_field
        rows = {
            row[field]: row
            for row in lifecycle.model._default_manager.filter(**{f"{field}__in": open_statuses})
            .order_by()
            .values(field)
            .annotate(n=Count("pk"), oldest=Min("created_at"))
        }
        for status in open_statuses:
            row = rows.get(status)
            items.add_metric([lifecycle.name, status], row["n"] if row else 0)
            age = (now - row["oldest"]).total_seconds() if row else 0.0
            oldest.add_metric([lifecycle.name, status], max(age, 0.0))
        if lifecycle.stuck_selector:
            count = import_string(lifecycle.stuck_selector)().count()
            stuck.add_metric([lifecycle.name], count)
    return [items, oldest, stuck]
