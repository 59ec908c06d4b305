from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, QuerySet
from django.utils import timezone

from actions.models import PENDING_ON_CHAIN, Action


class ActionNotFound(Exception):
    pass


class ActionAccessDenied(Exception):
    pass


def retention_cutoff(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(hours=settings.ACTION_RETENTION_HOURS)


def action_get_for_client(
    *, action_id: str, user, application, now: datetime | None = None
) -> Action:
    """The action as its creator (user + OAuth client) may see it, with the seed's errors."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        raise ActionNotFound(f"Action not found: {action_id}") from None
    action = (
        Action.objects.filter(pk=pk, created_at__gte=retention_cutoff(now))
        .select_related("user", "application")
        .first()
    )
    if action is None:
        raise ActionNotFound(f"Action not found: {action_id}")
    if action.user_id != user.pk:
        raise ActionAccessDenied("Action does not belong to the authenticated user")
    if application is None or action.application_id != application.pk:
        raise ActionAccessDenied("Action belongs to a different OAuth client")
    return action


def action_with_history(*, action_id) -> Action:
    return Action.objects.prefetch_related("history").get(pk=action_id)


def actions_pending_on_chain(*, limit: int) -> QuerySet[Action]:
    """Submitted/broadcast actions (user operations, and card actions awaiting Gnosis Pay),
    least recently reconciled first, so batches rotate."""
    return Action.objects.filter(status__in=PENDING_ON_CHAIN).order_by(
        F("last_reconciled_at").asc(nulls_first=True), "created_at"
    )[:limit]


def actions_stuck(*, minutes: int | None = None, now: datetime | None = None) -> QuerySet[Action]:
    minutes = minutes or settings.ACTIONS_STUCK_AFTER_MINUTES
    cutoff = (now or timezone.now()) - timedelta(minutes=minutes)
    return Action.objects.filter(status__in=PENDING_ON_CHAIN, updated_at__lt=cutoff)
