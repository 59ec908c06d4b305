"""Celery tasks: thin wrappers that call one service each. Each is registered under its
service's name (`actions.tasks.action_submit`: the routes, the beat schedule and
`enqueue_on_commit` use it); the function is `<service>_task`, so no two functions on one
path share a name."""

from __future__ import annotations

from celery import shared_task

from actions.accounts import change_delivery, recovery
from actions.bridges import services as bridges
from actions.execution import retention
from actions.execution import services as execution
from actions.history import services as history
from actions.permissions import follow
from core.lifecycle import Actor


@shared_task(name="actions.tasks.actions_expire_overdue")
def actions_expire_overdue_task() -> int:
    return execution.actions_expire_overdue()


@shared_task(name="actions.tasks.actions_reconcile_pending")
def actions_reconcile_pending_task() -> dict[str, int]:
    return dict(execution.actions_reconcile_pending())


@shared_task(name="actions.tasks.action_reconcile")
def action_reconcile_task(action_id: str) -> str:
    return execution.action_reconcile(action_id=action_id, actor=Actor.worker())


@shared_task(name="actions.tasks.actions_purge_retained")
def actions_purge_retained_task() -> int:
    return retention.actions_purge_retained()


@shared_task(name="actions.tasks.action_submit", acks_late=False)
def action_submit_task(action_id: str) -> str:
    return execution.action_submit(action_id=action_id).status


@shared_task(name="actions.tasks.card_purchases_sync_signed_in")
def card_purchases_sync_signed_in_task() -> int:
    return history.card_purchases_sync_signed_in()


@shared_task(name="actions.tasks.bridges_reconcile_pending")
def bridges_reconcile_pending_task() -> dict[str, int]:
    return dict(bridges.bridges_reconcile_pending())


@shared_task(name="actions.tasks.account_change_submit")
def account_change_submit_task(change_id: str) -> str:
    return change_delivery.account_change_submit(change_id=change_id).status


@shared_task(name="actions.tasks.account_changes_process")
def account_changes_process_task() -> dict[str, int]:
    return recovery.account_changes_process()


@shared_task(name="actions.tasks.spend_permissions_sweep")
def spend_permissions_sweep_task() -> int:
    return follow.spend_permissions_sweep()
