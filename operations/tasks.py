"""Celery tasks: thin wrappers that call one service each."""

from __future__ import annotations

from celery import shared_task

from operations import services


@shared_task(name="operations.tasks.operation_dispatch")
def operation_dispatch(operation_id: str) -> str:
    return services.operation_dispatch(operation_id=operation_id)


@shared_task(name="operations.tasks.operations_process_due")
def operations_process_due() -> dict[str, int]:
    return dict(services.operations_process_due())


@shared_task(name="operations.tasks.operations_expire_details")
def operations_expire_details() -> int:
    return services.operations_expire_details()
