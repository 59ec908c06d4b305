"""The event channel: what a transition publishes reaches a listener in another process's
place (a separate socket / Redis connection), on both backends."""

from __future__ import annotations

import anyio
import pytest

from actions.execution.models import ACTION_LIFECYCLE
from actions.tests.factories import make_card_freeze
from core import events
from core.lifecycle import Actor, transition


@pytest.mark.django_db(transaction=True)
def test_a_committed_transition_is_published(backend, user, application):
    action = make_card_freeze(user=user, application=application, summary="s")

    async def body():
        async with events.subscribe() as subscription:
            await anyio.to_thread.run_sync(
                lambda: transition(
                    lifecycle=ACTION_LIFECYCLE,
                    pk=action.pk,
                    to="rejected",
                    actor=Actor.system(),
                    detail="test",
                )
            )
            # Redis pub/sub ignores the database number: other systems on the same server
            # (a `make run`, a parallel run) may publish too, so wait for this action's event.
            with anyio.fail_after(2):
                while True:
                    event = await subscription.receive()
                    if event.get("id") == str(action.pk):
                        return event

    event = anyio.run(body)
    assert len(event.pop("event_id")) == 32  # what tells one event from another
    assert event == {
        "lifecycle": "action",
        "id": str(action.pk),
        "status": "rejected",
        "uri": f"picnic://action/{action.pk}",
    }


def test_a_vanished_local_listener_is_forgotten(settings, tmp_path):
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    settings.EVENTS_DIR.mkdir()
    stale = settings.EVENTS_DIR / "gone.sock"
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(stale))
    sock.close()  # the file stays, nobody reads it
    events.publish({"uri": "picnic://action/x"})
    assert not stale.exists()


def test_a_batch_publishes_its_events_together_when_it_ends(backend, settings):
    import json
    import socket
    import uuid

    ours = [str(uuid.uuid4()) for _ in range(3)]
    if backend == "redis":
        listener, heard = _redis_listener(settings, ours)

        def received() -> list[str]:
            return [id_ for id_, _ in heard()]
    else:
        folder = events._events_dir()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(str(folder / "test.sock"))
        listener.setblocking(False)

        def received() -> list[str]:
            seen = []
            while True:
                try:
                    seen.append(json.loads(listener.recv(4096))["id"])
                except BlockingIOError:
                    return seen

    try:
        with events.batch():
            events.publish({"id": ours[0]})
            with events.batch():  # joins the outer batch
                events.publish({"id": ours[1]})
            assert received() == []
        assert received() == ours[:2]
        events.publish({"id": ours[2]})  # no batch: at once
        assert received() == ours[2:]
    finally:
        listener.close()


def _redis_listener(settings, ours):
    import json
    import time

    import redis

    listener = redis.Redis.from_url(settings.EVENTS_URL).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(events.channel())
    listener.get_message(timeout=0.5)  # the subscription is in place

    def received(seconds: float = 0.5) -> list[tuple[str, str]]:
        """(id, event_id) of each of our events heard within `seconds`."""
        seen, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = listener.get_message(timeout=0.1)
            event = json.loads(message["data"]) if message else {}
            if event.get("id") in ours:
                seen.append((event["id"], event["event_id"]))
        return seen

    return listener, received


@pytest.mark.parametrize("backend", ["redis"], indirect=True)
def test_a_flush_is_heard_at_once_and_its_replies_are_read_with_the_batchs_last(
    backend, monkeypatch
):
    import uuid

    from django.conf import settings

    ours = [str(uuid.uuid4()) for _ in range(3)]
    listener, received = _redis_listener(settings, ours)
    reads = []
    real_read = events._Publisher._read

    def read(publisher):
        reads.append(publisher.replies)
        real_read(publisher)

    monkeypatch.setattr(events._Publisher, "_read", read)
    try:
        with events.batch():
            events.publish({"id": ours[0]})
            events.publish({"id": ours[1]})
            events.flush()
            # Written before the wait the flush is for: a listener has them now ...
            assert [id_ for id_, _ in received()] == ours[:2]
            assert reads == []  # ... and nothing has waited for Redis's replies yet
            events.publish({"id": ours[2]})
        assert [id_ for id_, _ in received()] == ours[2:]
        assert reads == [3]  # one wait, for the three replies
        # The connection went back to the pool with nothing left unread on it.
        assert not events._redis().connection_pool._in_use_connections
        assert events._redis().publish(events.channel(), b"{}") >= 1
    finally:
        listener.close()


@pytest.mark.parametrize("backend", ["redis"], indirect=True)
def test_a_connection_dropped_between_a_flush_and_the_batchs_end_sends_everything_again(
    backend, caplog
):
    import uuid

    import redis
    from django.conf import settings

    ours = [str(uuid.uuid4()) for _ in range(2)]
    listener, received = _redis_listener(settings, ours)
    admin = redis.Redis.from_url(settings.EVENTS_URL)
    try:
        with events.batch():
            events.publish({"id": ours[0]})
            events.flush()
            [first] = received()
            # Redis drops the publisher's connection while the provider is being asked.
            [held] = events._redis().connection_pool._in_use_connections
            host, port = held._sock.getsockname()[:2]
            assert admin.client_kill(f"{host}:{port}")
            events.publish({"id": ours[1]})
        heard = received()
        # Every write made once more: the first event again with its own event_id (listeners
        # drop the repeat by it), then the second; nothing logged as lost.
        assert heard[0] == first and [id_ for id_, _ in heard] == ours
        assert "could not publish" not in caplog.text
        assert not events._redis().connection_pool._in_use_connections
    finally:
        listener.close()
        admin.close()
