"""Celery tasks: thin wrappers that call one service each. Each is registered under its
service's name (`actions.tasks.action_submit`: the routes, the beat schedule and
`enqueue_on_commit` use it); the function is `<service>_task`, so no two functions on one
path share a name."""

from __future__ import annotations

from celery import shared_task

from actions.accounts.public import account_change_submit, account_changes_process
from actions.bridges.public import bridges_reconcile_pending
from actions.execution.public import (
    action_reconcile,
    action_submit,
    actions_expire_overdue,
    actions_purge_retained,
    actions_reconcile_pending,
)
from actions.history.public import card_purchases_sync_signed_in
from actions.permissions.public import spend_permissions_sweep
from core.lifecycle import Actor


@shared_task(name="actions.tasks.actions_expire_overdue")
def actions_expire_overdue_task() -> int:
    return actions_expire_overdue()


@shared_task(name="actions.tasks.actions_reconcile_pending")
def actions_reconcile_pending_task() -> dict[str, int]:
    return dict(actions_reconcile_pending())


@shared_task(name="actions.tasks.action_reconcile")
def action_reconcile_task(action_id: str) -> str:
    return action_reconcile(action_id=action_id, actor=Actor.worker())


@shared_task(name="actions.tasks.actions_purge_retained")
def actions_purge_retained_task() -> int:
    return actions_purge_retained()


@shared_task(name="actions.tasks.action_submit", acks_late=False)
def action_submit_task(action_id: str) -> str:
    return action_submit(action_id=action_id).status


@shared_task(name="actions.tasks.card_purchases_sync_signed_in")
def card_purchases_sync_signed_in_task() -> int:
    return card_purchases_sync_signed_in()


@shared_task(name="actions.tasks.bridges_reconcile_pending")
def bridges_reconcile_pending_task() -> dict[str, int]:
    return dict(bridges_reconcile_pending())


@shared_task(name="actions.tasks.account_change_submit")
def account_change_submit_task(change_id: str) -> str:
    return account_change_submit(change_id=change_id).status


@shared_task(name="actions.tasks.account_changes_process")
def account_changes_process_task() -> dict[str, int]:
    return account_changes_process()


@shared_task(name="actions.tasks.spend_permissions_sweep")
def spend_permissions_sweep_task() -> int:
    return spend_permissions_sweep()
