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
