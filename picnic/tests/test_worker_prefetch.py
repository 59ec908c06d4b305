"""A solo worker on RabbitMQ keeps its prefetch when its connection is cut (a broker restart,
as its clients see one): the cause of the slow dm consumption the chaos test once found
(dev/testing.py, SOLO_PREFETCH; docs/deploy.md, "RabbitMQ").

A solo worker acknowledges even an at-most-once task only once the task returned, so with one
message prefetched the broker sends the next only after that ack's round trip through the
quorum queue. Celery sized the prefetch from --concurrency (the CPU count) at start and from
the pool's one process after a reconnect: 2, then 1. This reads the consumer's prefetch on
the broker itself before and after the connection is closed."""

from __future__ import annotations

import subprocess
from urllib.parse import urlsplit

from dev.testing import start_celery_worker, stop_celery_worker, wait_until


def _consumers(vhost: str, queue: str) -> list[tuple[str, int]]:
    """(channel, prefetch count) of each consumer of `queue`, as RabbitMQ sees them."""
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_consumers", "-p", vhost, "queue_name", "channel_pid",
         "prefetch_count"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    rows = [line.split("\t") for line in out.splitlines()]
    return [(row[1], int(row[2])) for row in rows if len(row) == 3 and row[0] == queue]


def test_a_solo_worker_keeps_its_prefetch_after_the_broker_cut_its_connection(
    rabbitmq_url, switch_broker, celery_test_queue, tmp_path
):
    switch_broker(rabbitmq_url)
    vhost = urlsplit(rabbitmq_url).path.lstrip("/")
    proc = start_celery_worker(queue=celery_test_queue, log_path=tmp_path / "worker.log")
    try:
        before = wait_until(lambda: _consumers(vhost, celery_test_queue), timeout=90)
        assert [prefetch for _, prefetch in before] == [2]
        subprocess.run(
            ["rabbitmqctl", "close_all_connections", "-p", vhost, "broker restart (test)"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        # The worker reconnects: a consumer on a new channel.
        after = wait_until(
            lambda: [c for c in _consumers(vhost, celery_test_queue) if c[0] != before[0][0]],
            timeout=90,
        )
        assert [prefetch for _, prefetch in after] == [2]
        assert proc.poll() is None
    finally:
        stop_celery_worker(proc)
    log = (tmp_path / "worker.log").read_text()
    assert log.count("Connected to amqp://") == 2, log[-2000:]
