"""Reads of operations shared by the admin and the metrics."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from operations.models import Operation, State


def operations_stuck(*, now: datetime | None = None) -> QuerySet[Operation]:
    """Running or waiting with no change for more than OPERATIONS_STUCK_RUNNING_MINUTES."""
    cutoff = (now or timezone.now()) - timedelta(minutes=settings.OPERATIONS_STUCK_RUNNING_MINUTES)
    return Operation.objects.filter(state__in=(State.RUNNING, State.WAITING), updated_at__lt=cutoff)
