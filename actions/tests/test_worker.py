"""A real Celery worker process, fed through the configured broker (Redis in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from actions import tasks
from actions.models import Action, ActionStatus
from actions.services import action_transition
from actions.tests.factories import make_action
from picnic.lifecycle import Actor
from picnic.testing import ScriptedServer, wait_until

ROOT = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        return f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_reconciles_an_action_sent_through_the_broker(user, application, tmp_path):
    action = make_action(user=user, application=application)
    for step in (ActionStatus.SIGNED, ActionStatus.SUBMITTED, ActionStatus.BROADCAST):
        action_transition(action_id=action.pk, to=step, actor=Actor.system())
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with ScriptedServer() as bundler:
        bundler.result = {
            "success": True,
            "reason": "0x",
            "receipt": {"transactionHash": "0x" + "ee" * 32, "blockNumber": "0x5"},
        }
        env = {
            **os.environ,
            "DATABASE_URL": _database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "BUNDLER_RPC_URL": bundler.url,
        }
        log = (tmp_path / "worker.log").open("w")
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "picnic",
                "worker",
                "--pool=solo",
                "-Q",
                queue,
                "--without-gossip",
                "--without-mingle",
                "-l",
                "info",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            tasks.action_reconcile.apply_async(args=[str(action.pk)], queue=queue)
            wait_until(
                lambda: Action.objects.get(pk=action.pk).status == ActionStatus.EXECUTED,
                timeout=60,
            )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            log.close()
    row = Action.objects.get(pk=action.pk).history.last()
    assert (row.status, row.actor_kind) == ("executed", "worker")
    assert bundler.requests[0]["method"] == "eth_getUserOperationReceipt"
