"""Resumable SSE streams (2025-11-25): the priming event and `retry`, Last-Event-ID replay over
the real HTTP app, one session never replaying another's events, and the store's bounds in
memory and in Redis."""

from __future__ import annotations

import json
import uuid

import anyio
import mcp_types as types
import pytest
import requests
from django.conf import settings as django_settings

from mcp_adapter.event_store import INTERRUPTED, MemoryEvents, PicnicEventStore, RedisEvents
from mcp_adapter.tests.test_http import Session, sse_events

pytestmark = pytest.mark.django_db(transaction=True)


def replayed(url: str, headers: dict, last_event_id: str) -> list[dict]:
    """The events a GET with Last-Event-ID brings (the stream then stays open: read what the
    replay sent, until a response or the stream ends)."""
    found = []
    with requests.get(
        url, headers={**headers, "Last-Event-ID": last_event_id}, stream=True, timeout=5
    ) as response:
        assert response.status_code == 200
        block = ""
        for line in response.iter_lines(decode_unicode=True):
            if line:
                block += line + "\n"
                continue
            found.extend(sse_events(block))
            block = ""
            if any('"result"' in e.get("data", "") for e in found):
                break
        found.extend(sse_events(block))
    return found


def test_a_lost_stream_is_primed_and_replayed_after_last_event_id(
    http_server, action, user, application, make_token
):
    token = make_token(user, application, scope="read:actions")
    with http_server(MCP_SSE_RETRY_MS=250) as http:
        session = Session(http.url, token.token)
        response = session.post(
            "tools/call", {"name": "get_action_status", "arguments": {"action_id": str(action.pk)}}
        )
        events = sse_events(response.text)
        priming, last = events[0], events[-1]
        # The priming event: an id, empty data, and when to reconnect.
        assert priming["id"] and priming["data"] == "" and priming["retry"] == "250"
        assert json.loads(last["data"])["result"]["structuredContent"]["status"] == "proposed"
        # A client that lost the stream after the priming event gets the rest again.
        again = replayed(http.url, session.headers, priming["id"])
        # Another session (same user, same token) cannot read this session's events.
        other = Session(http.url, token.token)
        with requests.get(
            http.url, headers={**other.headers, "Last-Event-ID": priming["id"]}, timeout=5
        ) as foreign:
            foreign_events = sse_events(foreign.text)
    assert [e["data"] for e in again if e.get("data")] == [last["data"]]
    assert [e for e in again if e.get("data")][0]["id"] == last["id"]
    assert not [e for e in foreign_events if e.get("data")]


def _message(n: int) -> types.JSONRPCMessage:
    return types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/message", params={"level": "info", "data": n}
    )


async def _store_and_replay(backend, stream_id=1):
    store = PicnicEventStore(backend)
    # The request is being handled here: its stream is handed back to the SDK to follow.
    mine, theirs = (store.for_session(uuid.uuid4().hex, handling=lambda _: True) for _ in "ab")
    priming = await mine.store_event(stream_id, None)
    ids = [await mine.store_event(stream_id, _message(n)) for n in range(3)]
    await theirs.store_event(stream_id, _message(99))  # same request id, other session
    sent = []

    async def send(event):
        sent.append((event.event_id, event.message.params["data"]))

    stream = await mine.replay_events_after(priming, send)
    foreign = await theirs.replay_events_after(priming, send)
    bogus = await mine.replay_events_after("not-an-event-id", send)
    return stream, ids, sent, foreign, bogus


def test_memory_streams_keep_their_last_events_and_stay_per_session():
    stream, ids, sent, foreign, bogus = anyio.run(_store_and_replay, MemoryEvents(max_events=2))
    assert stream == 1  # the request id, with its JSON type
    assert sent == [(ids[1], 1), (ids[2], 2)]  # bounded: the oldest events are gone
    assert foreign is None and bogus is None


def test_memory_forgets_the_oldest_streams_first():
    async def body():
        backend = MemoryEvents(max_events=5, max_streams=2)
        session = PicnicEventStore(backend).for_session("s")
        first = await session.store_event("a", None)
        await session.store_event("b", None)
        await session.store_event("c", None)
        return await session.replay_events_after(first, lambda e: None)

    assert anyio.run(body) is None


@pytest.fixture
def redis_events():
    import redis

    url = django_settings.CELERY_BROKER_URL  # the test run's own Redis db
    if not url.startswith("redis"):
        pytest.skip("needs Redis (CELERY_BROKER_URL=redis://…)")
    backend = RedisEvents(url, max_events=2, ttl_seconds=120)
    yield backend
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(backend.prefix + "*"):
        client.delete(key)


def test_redis_streams_are_bounded_expire_and_stay_per_session(redis_events):
    import redis

    stream, ids, sent, foreign, bogus = anyio.run(_store_and_replay, redis_events, "req-1")
    assert stream == "req-1"
    assert sent == [(ids[1], 1), (ids[2], 2)]
    assert foreign is None and bogus is None
    client = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    key = redis_events.prefix + ids[0].rsplit(".", 1)[0]
    assert client.xlen(key) == 2 and 0 < client.ttl(key) <= 120


def _answer(request_id) -> types.JSONRPCMessage:
    return types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"n": 1})


async def _resume_orphan(backend, answer_after: float | None):
    """A request stream (the SDK names it `str(id)`) resumed where nobody handles request 7:
    its instance died after the priming event and one notification (or, `answer_after`
    seconds into the wait, another instance writes the answer into the store)."""
    session = PicnicEventStore(backend).for_session(uuid.uuid4().hex)  # handling nothing
    priming = await session.store_event("7", None)
    await session.store_event("7", _message(1))
    sent = []

    async def send(event):
        sent.append(event)

    async def answer_later():
        await anyio.sleep(answer_after)
        await session.store_event("7", _answer(7))

    async with anyio.create_task_group() as tg:
        if answer_after is not None:
            tg.start_soon(answer_later)
        started = anyio.current_time()
        stream = await session.replay_events_after(priming, send)
        waited = anyio.current_time() - started
    again = []

    async def collect(event):
        again.append(event)

    await session.replay_events_after(priming, collect)  # a client that lost that answer too
    return stream, sent, waited, again


def test_a_resumed_request_nobody_answers_is_told_interrupted_after_the_wait(settings):
    settings.MCP_RESUME_WAIT_SECONDS = 0.6
    stream, sent, waited, again = anyio.run(_resume_orphan, MemoryEvents(max_events=10), None)
    assert stream is None  # the SDK ends the stream: nothing more will come on it
    assert waited >= 0.6
    assert isinstance(sent[0].message, types.JSONRPCNotification)
    error = sent[-1].message
    assert isinstance(error, types.JSONRPCError)
    assert error.id == 7  # the client's own id, a number again
    assert error.error.code == types.CONNECTION_CLOSED and error.error.message == INTERRUPTED
    # Stored: the next resumption gets it at once, with the same event id.
    assert [e.event_id for e in again] == [e.event_id for e in sent]


def test_a_resumed_request_answered_elsewhere_during_the_wait_gets_that_answer(settings):
    settings.MCP_RESUME_WAIT_SECONDS = 5
    stream, sent, waited, _ = anyio.run(_resume_orphan, MemoryEvents(max_events=10), 0.3)
    assert stream is None and waited < 5
    assert isinstance(sent[-1].message, types.JSONRPCResponse) and sent[-1].message.id == 7
    assert not any(isinstance(e.message, types.JSONRPCError) for e in sent)


def test_a_resumed_request_on_redis_is_told_interrupted_too(settings, redis_events):
    settings.MCP_RESUME_WAIT_SECONDS = 0.5
    redis_events.max_events = 10
    stream, sent, _, again = anyio.run(_resume_orphan, redis_events, None)
    assert stream is None and isinstance(sent[-1].message, types.JSONRPCError)
    assert again[-1].event_id == sent[-1].event_id


def test_an_event_the_store_cannot_take_goes_out_without_an_id(caplog):
    """Redis away beyond the client's retries: the message is still sent (live, no id) instead
    of the error reaching the SDK's message router, which would stop routing the session's
    answers for good (every later tool call of the session would wait for ever)."""
    from dev.cluster import free_port

    backend = RedisEvents(f"redis://127.0.0.1:{free_port()}/0", max_events=10, ttl_seconds=60)
    backend.client.connection_pool.connection_kwargs["retry"] = None  # fail at once here
    session = PicnicEventStore(backend).for_session(uuid.uuid4().hex)

    async def store():
        return await session.store_event("1", _message(1)), await session.store_event("1", None)

    with caplog.at_level("WARNING", logger="mcp_adapter.event_store"):
        assert anyio.run(store) == ("", "")
    assert "not stored" in caplog.text
