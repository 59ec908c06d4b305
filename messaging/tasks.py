"""Celery tasks: thin wrappers that call one service each."""

from __future__ import annotations

import os
import socket
import uuid

from celery import shared_task

from messaging import worker


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# acks_late off: a redelivered task must never resend; the lease reaper handles dead workers.
@shared_task(name="messaging.tasks.delivery_deliver", acks_late=False)
def delivery_deliver(delivery_id: str) -> str:
    return worker.delivery_process(delivery_id=delivery_id, worker_id=_worker_id())


@shared_task(name="messaging.tasks.deliveries_process_due", acks_late=False)
def deliveries_process_due() -> dict[str, int]:
    return worker.deliveries_process_due(worker_id=_worker_id())


@shared_task(name="messaging.tasks.deliveries_reap_leases")
def deliveries_reap_leases() -> int:
    return worker.deliveries_reap_leases()
