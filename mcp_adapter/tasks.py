"""Celery tasks: thin wrappers that call one service each."""

from __future__ import annotations

from celery import shared_task

from mcp_adapter import task_store


@shared_task(name="mcp_adapter.tasks.tasks_purge_expired")
def tasks_purge_expired() -> int:
    return task_store.tasks_purge_expired()
