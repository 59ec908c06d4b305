"""Broker faults lose no work and hold no request, on each broker.

A restart (`soak`): a private Redis with AOF (`appendfsync always`) killed with SIGKILL, and a
private RabbitMQ node with quorum queues stopped, each while DM sends wait in its queue, then
started again on the same data. Sends accepted while the broker was down have no message at
all: the beat's sweep re-derives them from the database. Every delivery ends `sent`, with
exactly one request to the X API each.

A broker that answers nothing (the path to it cut: no reset, no refusal; dev.testing.TcpCut in
front of the test session's Redis or RabbitMQ vhost): a DM send is answered within the publish
bound (picnic.brokers.publish_bound), accepted and left to the beat's sweep, which sends it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from kombu import Connection

from chain.stack import free_port
from dev import processes
from dev.providers.local_x import LocalXServer
from dev.testing import TcpCut, history_statuses, process_env, wait_until
from messaging.models import D, Delivery
from messaging.tests.factories import TOKEN_ENV, X_TOKEN
from messaging.worker import deliveries_process_due
from picnic.brokers import publish_bound

pytestmark = pytest.mark.django_db(transaction=True)

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # not the su wrapper on PATH


class PrivateBroker:
    """One broker process of the test's own on free ports, its data under `work`."""

    def __init__(self, kind: str, work: Path):
        self.kind, self.work, self.port = kind, work, free_port()
        self.proc: subprocess.Popen | None = None
        if kind == "redis":
            self.url = f"redis://127.0.0.1:{self.port}/0"
            self.argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
                         "--dir", str(work), "--appendonly", "yes", "--appendfsync", "always",
                         "--save", ""]  # fmt: skip
            self.env = dict(os.environ)
        else:
            self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/"
            (work / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
            (work / "enabled_plugins").write_text("[].\n")
            self.argv = [str(RABBITMQ_SERVER)]
            self.env = {
                **os.environ,
                "RABBITMQ_NODENAME": f"picnic-test-{uuid.uuid4().hex[:8]}@localhost",
                "RABBITMQ_DIST_PORT": str(free_port()),
                "RABBITMQ_CONFIG_FILE": str(work / "rabbitmq.conf"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(work / "enabled_plugins"),
                "RABBITMQ_MNESIA_BASE": str(work / "mnesia"),
                "RABBITMQ_LOG_BASE": str(work / "log"),
            }

    def start(self) -> float:
        """Starts it and returns the seconds until it accepts connections."""
        started = time.monotonic()
        log = open(self.work / f"{self.kind}.out", "a")  # noqa: SIM115 - the child has a copy
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        wait_until(self.answers, timeout=120)
        return time.monotonic() - started

    def answers(self) -> bool:
        try:
            with Connection(self.url, connect_timeout=1) as conn:
                conn.ensure_connection(max_retries=0)
            return True
        except Exception:  # noqa: BLE001 - any failure to connect means "not yet"
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=60)

    def waiting(self, queue: str) -> int:
        """Messages in `queue`: Redis's list length, or RabbitMQ's count (passive declare)."""
        with Connection(self.url) as conn:
            if self.kind == "redis":
                return conn.default_channel.client.llen(queue)
            return conn.default_channel.queue_declare(queue=queue, passive=True).message_count


@pytest.fixture(params=["redis", "amqp"])
def broker(request, tmp_path, switch_broker):
    if request.param == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    if request.param == "amqp" and not RABBITMQ_SERVER.exists():
        pytest.skip(f"RabbitMQ is not installed ({RABBITMQ_SERVER})")
    work = tmp_path / request.param
    work.mkdir()
    private = PrivateBroker(request.param, work)
    private.first_start = private.start()
    switch_broker(private.url)
    yield private
    if private.proc is not None and private.proc.poll() is None:
        private.kill()


@pytest.mark.soak
def test_a_broker_killed_with_queued_sends_loses_none_and_the_sweep_finds_the_rest(
    broker, celery_test_queue, queue, tmp_path
):
    # No worker yet: each send's on-commit task waits in the broker.
    queued = [queue(f"before the restart {n}") for n in range(5)]
    wait_until(lambda: broker.waiting(celery_test_queue) == 5, timeout=30)
    # Redis is killed outright (AOF, fsync on every write). RabbitMQ is stopped (SIGTERM): on
    # this machine a single node killed with SIGKILL came back with its quorum queue leaderless
    # (docs/deploy.md, "RabbitMQ").
    broker.kill(signal.SIGKILL if broker.kind == "redis" else signal.SIGTERM)
    # Accepted while the broker is down: committed, but the enqueue fails (logged, not raised).
    orphans = [queue(f"while the broker is down {n}") for n in range(3)]
    restart = broker.start()
    # Every queued message survived the kill (a quorum queue answers once its log is replayed).
    wait_until(lambda: broker.waiting(celery_test_queue) == 5, timeout=90)
    deliveries = queued + orphans

    prefix = f"restart-{uuid.uuid4().hex[:8]}."
    with LocalXServer(token=X_TOKEN) as x:
        # The broker's URL too: `switch_broker` pointed the settings at it.
        env = process_env(
            {
                "CELERY_QUEUE_PREFIX": prefix,
                "X_API_BASE_URL": x.url,
                "DM_RETRY_BACKOFF_SECONDS": "0",
                TOKEN_ENV: X_TOKEN,
            }
        )
        started = time.monotonic()
        worker = processes.celery_worker(
            env, tmp_path / "worker.log", queues=[celery_test_queue, f"{prefix}dm"], concurrency=1
        ).start()
        beat = processes.celery_beat(
            env, tmp_path / "beat.log", schedule_path=tmp_path / "beat-schedule"
        ).start()
        try:
            wait_until(
                lambda: Delivery.objects.filter(pk__in=[d.pk for d in deliveries], status=D.SENT)
                .count() == len(deliveries),
                timeout=120,
            )  # fmt: skip
            settled = time.monotonic() - started
        finally:
            beat.stop()
            worker.stop()
        texts = sorted(request["text"] for request in x.requests)
    assert texts == sorted(d.text for d in deliveries)  # each sent once, none twice
    for delivery in deliveries:
        history = list(
            delivery.history.order_by("timestamp", "id").values_list("status", flat=True)
        )
        assert history == ["queued", "claimed", "sending", "sent"]
    print(
        f"{broker.kind}: first start {broker.first_start:.1f} s, restart "
        f"{restart:.1f} s, all {len(deliveries)} sent {settled:.1f} s after the worker started"
    )


# What a request adds to its publish's bound on a loaded machine (the view, its statements).
REQUEST_MARGIN = 2.0
DEFAULT_PORTS = {"redis": 6379, "amqp": 5672}


def queued_messages(url: str, queue: str) -> int:
    """Messages waiting in `queue` on the broker itself (not through the cut path)."""
    with Connection(url, connect_timeout=5) as conn:
        if url.startswith("redis"):
            return conn.default_channel.client.llen(queue)
        return conn.default_channel.queue_declare(queue=queue, passive=True).message_count


def test_a_send_while_the_broker_answers_nothing_is_answered_in_time_and_the_sweep_sends_it(
    celery_broker, celery_test_queue, switch_broker, settings, post, send_body, dm_token,
    x_server, caplog,
):  # fmt: skip
    # The web's publisher has a pooled connection to the broker, and then the path to the
    # broker is cut: the broker neither answers nor closes anything. Without a bound the
    # publish (a Redis LPUSH, RabbitMQ's publisher confirm) waits for ever, and so does the
    # request; with it the publish gives up within publish_bound() and raises, the on-commit
    # hand-over logs it (robust: the send is committed before it), and the request is
    # answered. Its contract (core.lifecycle.enqueue_on_commit): accepted, 202, queued in the
    # database with no message, and the beat's sweep sends it.
    parts = urlsplit(celery_broker)
    if parts.scheme not in DEFAULT_PORTS:
        pytest.skip(f"needs a broker over TCP (Redis or RabbitMQ), not {parts.scheme}://")
    bound = publish_bound(settings.BROKER_TIMEOUT_SECONDS) + REQUEST_MARGIN
    with TcpCut(parts.hostname, parts.port or DEFAULT_PORTS[parts.scheme]) as path:
        userinfo = parts.netloc.rpartition("@")[0]
        address = f"127.0.0.1:{path.port}"
        switch_broker(urlunsplit(parts._replace(netloc=f"{userinfo}@{address}".lstrip("@"))))

        def send(text: str):
            body = {**send_body, "text": text, "idempotency_key": str(uuid.uuid4())}
            started = time.monotonic()
            response = post("send", body, dm_token)
            return response, time.monotonic() - started

        before, _ = send("before the cut")
        assert before.status_code == 202, before.content
        waiting = queued_messages(celery_broker, celery_test_queue)
        failed_before = len([r for r in caplog.records if "on_commit" in r.getMessage()])
        path.cut()
        cut = [send(f"while the path is cut {n}") for n in range(2)]
        failed = [r for r in caplog.records if "on_commit" in r.getMessage()][failed_before:]
        path.heal()
        after, after_took = send("after the cut healed")

    worst = max(took for _, took in cut)
    print(
        f"{parts.scheme}: sends while the broker's path was cut answered in "
        + ", ".join(f"{took:.2f} s" for _, took in cut)
        + f" (worst {worst:.2f} s, bound {bound:.1f} s); after it healed {after_took:.2f} s"
    )
    for response, took in cut:
        assert took <= bound, (took, bound)
        # Accepted: the delivery was committed before the hand-over, and a publish that fails
        # never undoes it (the client is not told to send it again).
        assert response.status_code == 202, response.content
        action = response.json()["action"]
        assert action["status"] == "queued"
        assert history_statuses(Delivery.objects.get(pk=action["id"])) == ["queued"]
    # Both publishes gave up (logged with the error), and neither reached the broker: the
    # healed path delivered none of what it held back. After the cut the publisher reconnects.
    assert len(failed) == 2 and all(r.exc_info for r in failed), [r.getMessage() for r in failed]
    assert after.status_code == 202 and after_took <= bound
    assert queued_messages(celery_broker, celery_test_queue) == waiting + 1
    # The beat's sweep (what the dm workers run every 5 s) sends every accepted DM, once.
    deliveries_process_due(worker_id="sweep")
    assert set(Delivery.objects.values_list("status", flat=True)) == {D.SENT}
    texts = sorted(request["text"] for request in x_server.requests)
    assert texts == sorted(["before the cut", "after the cut healed"] + [
        f"while the path is cut {n}" for n in range(2)
    ])  # fmt: skip
