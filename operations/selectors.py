"""Reads of operations shared by the API, the admin and the metrics."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from core.echo import named
from operations.models import Operation, State


def operations_stuck(*, now: datetime | None = None) -> QuerySet[Operation]:
    """Running or waiting with no change for more than OPERATIONS_STUCK_RUNNING_MINUTES."""
    cutoff = (now or timezone.now()) - timedelta(minutes=settings.OPERATIONS_STUCK_RUNNING_MINUTES)
    return Operation.objects.filter(state__in=(State.RUNNING, State.WAITING), updated_at__lt=cutoff)


class OperationNotFound(Exception):
    pass


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
