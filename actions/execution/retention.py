"""Retention: terminal actions leave the database after the window (24 h by default)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from actions.execution.models import ACTION_LIFECYCLE, Action
from actions.execution.selectors import retention_cutoff


@transaction.atomic
def actions_purge_retained(*, now: datetime | None = None) -> int:
    """Delete terminal actions past the retention window (24 h by default).

    Non-terminal ones stay for support staff: stuck work is never silently dropped.
    """
    deleted, _ = Action.objects.filter(
        created_at__lt=retention_cutoff(now), status__in=ACTION_LIFECYCLE.terminal
    ).delete()
    return deleted
