"""Reads of operations shared by the API, the admin and the metrics."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from core.echo import named
from operations.errors import OperationNotFound
from operations.models import Operation, State


def operations_stuck(*, now: datetime | None = None) -> QuerySet[Operation]:
    """Running or waiting with no change for more than OPERATIONS_STUCK_RUNNING_MINUTES."""
    cutoff = (now or timezone.now()) - timedelta(minutes=settings.OPERATIONS_STUCK_RUNNING_MINUTES)
    return Operation.objects.filter(state__in=(State.RUNNING, State.WAITING), updated_at__lt=cutoff)


def operation_get_for_client(*, operation_id: str, user, application) -> Operation:
    """The operation as its agent sees it: the user's, started by this OAuth application
    (operations are per agent, as actions are). A malformed id, another user's operation and
    another agent's all raise the same OperationNotFound as a missing one."""
    try:
        pk = uuid.UUID(str(operation_id))
    except ValueError:
        raise OperationNotFound(f"Operation not found: {named(operation_id)}") from None
    operation = (
        Operation.objects.select_related("quote")
        .prefetch_related("components")
        .filter(pk=pk, owner=user, application=application)
        .first()
        if application is not None
        else None
    )
    if operation is None:
        raise OperationNotFound(f"Operation not found: {operation_id}")
    return operation


REVIEW_PAGE_SIZE = 20


class BadCursor(ValueError):
    """A review-queue cursor that is not one this page gave out."""


def _review_cursor(operation: Operation) -> str:
    return f"{operation.created_at.isoformat()}~{operation.pk}"


def review_cursor_position(after: str) -> tuple[datetime, uuid.UUID]:
    """(created_at, id) of a cursor `review_queue_page` gave out; BadCursor for any other."""
    created, _, pk = after.partition("~")
    try:
        created_at = datetime.fromisoformat(created)
        operation_id = uuid.UUID(pk)
    except ValueError:
        raise BadCursor(f"not a review-queue position: {named(after)}") from None
    if created_at.tzinfo is None:
        raise BadCursor(f"not a review-queue position: {named(after)}")
    return created_at, operation_id


def review_queue_page(
    *, after: str | None = None, size: int = REVIEW_PAGE_SIZE
) -> tuple[list[Operation], str | None]:
    """Operations waiting for review, oldest first, `size` at a time after the cursor `after`
    (keyset on created_at and id over a partial index: a later page costs what the first
    does, however long the queue), and the cursor of the next page, or None on the last."""
    rows = (
        Operation.objects.filter(state=State.NEEDS_REVIEW)
        .select_related("owner")
        .order_by("created_at", "id")
    )
    if after:
        created_at, operation_id = review_cursor_position(after)
        rows = rows.filter(
            Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=operation_id)
        )
    page = list(rows[: size + 1])
    more = len(page) > size
    page = page[:size]
    return page, _review_cursor(page[-1]) if more else None


def review_queue_count() -> int:
    return Operation.objects.filter(state=State.NEEDS_REVIEW).count()
