"""Fault tests with a real Celery worker process, fed through the broker: each runs on the
configured one (Redis in CI) and on RabbitMQ with quorum queues (`celery_broker`)."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from chain.stack import free_port
from dev.providers.local_x import LocalXServer
from dev.testing import start_celery_worker, stop_celery_worker, wait_until
from messaging import tasks
from messaging.models import D, Delivery
from messaging.tests.factories import TOKEN_ENV, X_TOKEN
from messaging.worker import deliveries_process_due, deliveries_reap_leases

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker(celery_broker, celery_test_queue, tmp_path):
    """Starts real workers on the test queue, on each broker in turn (`celery_broker`)."""
    started = []

    def start(base_url: str, *, timeout: str = "1", lease: str = "2"):
        proc = start_celery_worker(
            queue=celery_test_queue,
            log_path=tmp_path / f"worker-{len(started)}.log",
            env={
                "X_API_BASE_URL": base_url,
                "DM_PROVIDER_TIMEOUT_SECONDS": timeout,
                "DM_LEASE_SECONDS": lease,
                "DM_RETRY_BACKOFF_SECONDS": "0",
                TOKEN_ENV: X_TOKEN,
            },
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        stop_celery_worker(proc)


def _status(delivery) -> str:
    return Delivery.objects.get(pk=delivery.pk).status


def test_kill_9_while_the_provider_holds_the_request_ends_unknown_sent_once(worker, queue):
    with LocalXServer(token=X_TOKEN, mode="hang") as server:
        proc = worker(server.url, timeout="30", lease="31")
        delivery = queue("hello")
        assert server.received.wait(timeout=60), "the worker never reached the provider"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _status(delivery) == D.SENDING
        # The dead worker's lease lapses (forced here instead of waiting 31 s), and the
        # reaper settles what nobody can know.
        Delivery.objects.filter(pk=delivery.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        assert deliveries_reap_leases() == 1
        assert _status(delivery) == D.UNKNOWN
        # Nothing sends it again: another worker pass finds nothing to do.
        assert deliveries_process_due(worker_id="after") == {}
        assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("marker", "reason"), [("[hang]", "no answer within 1s"), ("[drop]", "connection lost")]
)
def test_a_hanging_or_dropping_provider_ends_unknown(worker, queue, marker, reason):
    with LocalXServer(token=X_TOKEN) as server:
        worker(server.url)
        delivery = queue(f"{marker} hello")
        wait_until(lambda: _status(delivery) == D.UNKNOWN, timeout=60)
        assert Delivery.objects.get(pk=delivery.pk).reason.startswith(reason)
        assert len(server.requests) == 1


def test_a_refused_connection_is_retried_and_sent_once(worker, queue):
    port = free_port()
    worker(f"http://127.0.0.1:{port}")
    delivery = queue("hello")
    wait_until(lambda: Delivery.objects.get(pk=delivery.pk).attempts == 1, timeout=60)
    assert _status(delivery) == D.CLAIMED
    with LocalXServer(port=port, token=X_TOKEN) as server:
        tasks.deliveries_process_due.delay()  # what beat does every few seconds
        wait_until(lambda: _status(delivery) == D.SENT, timeout=60)
        assert len(server.requests) == 1
    statuses = list(Delivery.objects.get(pk=delivery.pk).history.values_list("status", flat=True))
    assert statuses == ["queued", "claimed", "sending", "sent"]
