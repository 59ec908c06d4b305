"""The embedded broker (kombu's filesystem transport, picnic/filesystem_broker.py): a consumer
polling the queue while messages are being written never gets a partial one. With kombu's own
transport it reads half-written files (an empty one kills the worker, which stops make run)."""

from __future__ import annotations

import threading

from kombu import Connection
from kombu.exceptions import DecodeError

from picnic.filesystem_broker import Transport

MESSAGES = 40
BODY = "x" * 2_000_000  # long enough that writing one takes many polls of the consumer


def test_a_consumer_polling_during_writes_reads_only_whole_messages(tmp_path):
    (tmp_path / "queue").mkdir()
    options = {
        "data_folder_in": str(tmp_path / "queue"),
        "data_folder_out": str(tmp_path / "queue"),
        "staging_folder": str(tmp_path / "staging"),
        "control_folder": str(tmp_path / "control"),
    }
    received, broken = [], []

    def consume() -> None:
        with Connection("filesystem://", transport=Transport, transport_options=options) as conn:
            queue = conn.SimpleQueue("work")
            while len(received) + len(broken) < MESSAGES:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    continue
                except (DecodeError, ValueError) as exc:  # what a half-written file reads as
                    broken.append(exc)
                    continue
                received.append(message.payload)
                message.ack()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    with Connection("filesystem://", transport=Transport, transport_options=options) as conn:
        queue = conn.SimpleQueue("work")
        for n in range(MESSAGES):
            queue.put({"n": n, "body": BODY})
    consumer.join(timeout=120)
    assert not consumer.is_alive()
    assert broken == []
    assert sorted(message["n"] for message in received) == list(range(MESSAGES))
    assert all(message["body"] == BODY for message in received)
    assert list((tmp_path / "staging").iterdir()) == []  # each one was renamed into the queue
