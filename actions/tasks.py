"""Celery tasks: thin wrappers that call one service each."""

from __future__ import annotations

from celery import shared_task

from actions.services import (
    account_changes,
    bridges,
    history,
    lifecycle,
    recovery,
    retention,
    spend_follow,
)
from core.lifecycle import Actor


@shared_task(name="actions.tasks.actions_expire_overdue")
def actions_expire_overdue() -> int:
    return lifecycle.actions_expire_overdue()


@shared_task(name="actions.tasks.actions_reconcile_pending")
def actions_reconcile_pending() -> dict[str, int]:
    return dict(lifecycle.actions_reconcile_pending())


@shared_task(name="actions.tasks.action_reconcile")
def action_reconcile(action_id: str) -> str:
    return lifecycle.action_reconcile(action_id=action_id, actor=Actor.worker())


@shared_task(name="actions.tasks.actions_purge_retained")
def actions_purge_retained() -> int:
    return retention.actions_purge_retained()


@shared_task(name="actions.tasks.action_submit", acks_late=False)
def action_submit(action_id: str) -> str:
    return lifecycle.action_submit(action_id=action_id).status


@shared_task(name="actions.tasks.card_purchases_sync_signed_in")
def card_purchases_sync_signed_in() -> int:
    return history.card_purchases_sync_signed_in()


@shared_task(name="actions.tasks.bridges_reconcile_pending")
def bridges_reconcile_pending() -> dict[str, int]:
    return dict(bridges.bridges_reconcile_pending())


@shared_task(name="actions.tasks.account_change_submit")
def account_change_submit(change_id: str) -> str:
    return account_changes.account_change_submit(change_id=change_id).status


@shared_task(name="actions.tasks.account_changes_process")
def account_changes_process() -> dict[str, int]:
    return recovery.account_changes_process()


@shared_task(name="actions.tasks.spend_permissions_sweep")
def spend_permissions_sweep() -> int:
    return spend_follow.spend_permissions_sweep()
