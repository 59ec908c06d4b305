"""What Celery needs on RabbitMQ beyond the broker's URL (CELERY_BROKER_URL=amqp://…).

- Quorum queues (`x-queue-type: quorum`): replicated Raft logs on disk, so a broker restart
  (or the loss of a minority of nodes) keeps every queued message. The queue of each kind of
  work is declared so, and so is any queue a test or an operator names (create-missing type).
- Publisher confirms (`confirm_publish`): `.delay()` returns once the broker has the message
  on disk, not when it left our socket.
- Late acknowledgement where the project already uses it (every task but the at-most-once
  ones: action_submit, delivery_deliver, deliveries_process_due), with
  `task_reject_on_worker_lost`: a worker killed mid-task gives its message back at once.
  Prefetch stays 1 (settings), and Celery turns global QoS off for quorum queues itself.
- Poison messages: a message given back `delivery_limit` times (a task that kills its worker
  every time) is dead-lettered to `<prefix>dead`, a quorum queue nobody consumes, instead of
  looping; the beat sweeps re-derive the state it was about anyway.
- Topic exchanges: Celery's native delayed delivery (countdown/ETA on quorum queues, which
  cannot hold a message back themselves) needs them; the project schedules nothing with a
  countdown today (retries are due times in the database, picked up by the beat sweeps).

And on every broker, a bounded publish (`publish_bound_settings`): a broker that stops
answering without closing the connection (a frozen node, a network path that drops packets)
must not hold the request that publishes. Each step of a publish (connecting, a Redis command,
RabbitMQ's confirm) gives up after BROKER_TIMEOUT_SECONDS, and a failed publish is tried
PUBLISH_RETRY_POLICY's `max_retries` more times (reconnecting, on the next node of a list):
then it raises, the request goes on (the on-commit hand-over is robust) and the beat's sweep
re-derives the work from the database. docs/deploy.md ("A broker that does not answer") has
the bound this gives, measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kombu import Exchange, Queue


def dead_letter_queue(prefix: str) -> Queue:
    """Where a quorum queue puts a message given back too often (declared by each worker)."""
    name = f"{prefix}dead"
    return Queue(
        name,
        Exchange(name, type="topic"),
        routing_key=name,
        queue_arguments={"x-queue-type": "quorum"},
    )


# Celery's own policy (no pause, then 0.2 s between tries) with one try fewer: a publish to a
# broker that does not answer costs about (max_retries + 2) timeouts (docs/deploy.md).
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2,
                        "interval_max": 0.2}  # fmt: skip


def publish_bound(timeout: float) -> float:
    """The longest a publish waits on a broker that answers nothing: the publish on its pooled
    connection, then a connect on each of the `max_retries` + 1 tries, each given up after
    `timeout`, and the pauses between the tries (8.4 s with the defaults)."""
    policy = PUBLISH_RETRY_POLICY
    return (policy["max_retries"] + 2) * timeout + policy["max_retries"] * policy["interval_max"]


def redis_timeouts(timeout: float, *, sentinel: bool = False) -> dict[str, Any]:
    """Transport options of a Redis broker: no command and no connect waits longer than
    `timeout` (kombu's default is to wait forever on a connection the broker left open). With
    Sentinel the same for the sentinels asked for the primary."""
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if sentinel:
        options["sentinel_kwargs"] = dict(options)
    return options


def publish_bound_settings(url: str, timeout: float) -> dict[str, Any]:
    """The Celery settings (lower-case names) that bound a publish to the broker at `url`;
    RabbitMQ's confirm is bounded per publish (picnic.celery.Task)."""
    bound: dict[str, Any] = {
        "broker_connection_timeout": timeout,
        "task_publish_retry_policy": dict(PUBLISH_RETRY_POLICY),
    }
    if url.startswith(("redis://", "rediss://", "sentinel://")):
        options = redis_timeouts(timeout, sentinel=url.startswith("sentinel://"))
        bound["broker_transport_options"] = options
    return bound


def amqp_celery_settings(
    *, queues: Iterable[str], prefix: str, delivery_limit: int
) -> dict[str, Any]:
    """The Celery settings (lower-case names, as app.conf takes them) for RabbitMQ."""
    dead = dead_letter_queue(prefix)
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": delivery_limit,
        "x-dead-letter-exchange": dead.exchange.name,
        "x-dead-letter-routing-key": dead.routing_key,
    }
    return {
        "broker_transport_options": {"confirm_publish": True},
        "task_queues": [
            Queue(name, Exchange(name, type="topic"), routing_key=name, queue_arguments=arguments)
            for name in queues
        ],
        "task_default_queue_type": "quorum",
        "task_default_exchange_type": "topic",
        "task_create_missing_queue_type": "quorum",
        "task_create_missing_queue_exchange_type": "topic",
        "task_reject_on_worker_lost": True,
        "worker_detect_quorum_queues": True,
    }
