"""The credits held on wallets, a scrape-time gauge: OperationsConfig.ready() registers it into
core.metrics."""

from __future__ import annotations

from django.db.models import Sum
from prometheus_client.core import GaugeMetricFamily

from operations.models import Wallet


def credits_held_families() -> list[GaugeMetricFamily]:
    held = GaugeMetricFamily(
        "picnic_credits_held",
        "Credits held on wallets for admitted operations (sum of Wallet.held_credits).",
    )
    # One query: the partial index wallet_holding holds only wallets with a hold.
    total = Wallet.objects.filter(held_credits__gt=0).aggregate(t=Sum("held_credits"))
    held.add_metric([], float(total["t"] or 0))
    return [held]
