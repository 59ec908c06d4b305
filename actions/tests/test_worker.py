"""A real Celery worker process, fed through each broker: the configured one (Redis in CI) and
RabbitMQ with quorum queues (`celery_broker`)."""

from __future__ import annotations

import uuid

import pytest

from actions import tasks
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.tests.factories import make_action
from core.lifecycle import Actor, transition
from dev.testing import ScriptedServer, start_celery_worker, stop_celery_worker, wait_until


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_reconciles_an_action_sent_through_the_broker(
    celery_broker, user, application, tmp_path
):
    action = make_action(user=user, application=application)
    for step in (ActionStatus.SIGNED, ActionStatus.SUBMITTED, ActionStatus.BROADCAST):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with ScriptedServer() as bundler:
        bundler.result = {
            "success": True,
            "reason": "0x",
            "receipt": {"transactionHash": "0x" + "ee" * 32, "blockNumber": "0x5"},
        }
        worker = start_celery_worker(
            queue=queue, log_path=tmp_path / "worker.log", env={"BUNDLER_RPC_URL": bundler.url}
        )
        try:
            tasks.action_reconcile_task.apply_async(args=[str(action.pk)], queue=queue)
            wait_until(
                lambda: Action.objects.get(pk=action.pk).status == ActionStatus.EXECUTED,
                timeout=60,
            )
        finally:
            stop_celery_worker(worker)
    row = Action.objects.get(pk=action.pk).history.last()
    assert (row.status, row.actor_kind) == ("executed", "worker")
    assert bundler.requests[0]["method"] == "eth_getUserOperationReceipt"
