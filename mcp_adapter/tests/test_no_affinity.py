"""No sticky sessions: two real MCP processes (`manage.py mcp --transport http`) on one Redis
and one database, and the SDK's client sending one session's requests to both in turn (a
round-robin HTTP transport in the client, the balancer of these tests).

A 2025-11-25 session opened on one instance is served by the other; its subscription outlives
the instance holding its stream (SIGKILL), and the stream resumed with Last-Event-ID on the
other instance brings every missed update once; a DELETE ends it on both; another user's token
finds no session on either; 2026-07-28 calls and listen streams need no session at all."""

from __future__ import annotations

import json
import os
import sys
import uuid

import anyio
import httpx2
import mcp_types as types
import pytest
import redis
import requests
from django.conf import settings as django_settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from actions.execution.models import Action
from chain.stack import free_port
from core.lifecycle import touch
from dev import processes
from dev.testing import database_url, wait_until
from mcp_adapter.sessions import EVENT_META_KEY
from mcp_adapter.tests.conftest import make_action, run
from mcp_adapter.tests.test_http import Session, messages

REDIS_URL = django_settings.CELERY_BROKER_URL
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not REDIS_URL.startswith("redis"), reason="needs Redis (CELERY_BROKER_URL=redis://…)"
    ),
]
PREFIX = f"noaff-{uuid.uuid4().hex[:8]}"  # this module's keys and event channel
PORT_A, PORT_B = free_port(), free_port()
RESOURCE = f"http://127.0.0.1:{PORT_A}/mcp"  # what the tokens are bound to (RFC 8707)


@pytest.fixture(scope="module")
def instances(django_db_setup, django_db_blocker, live_server, tmp_path_factory):
    """Instances A and B (A at the resource URL, B beside it), sharing Redis and the database."""
    logs = tmp_path_factory.mktemp("mcp")
    with django_db_blocker.unblock():
        db = database_url()
    env = {
        **os.environ,
        "DATABASE_URL": db,
        "EVENTS_URL": REDIS_URL,
        "DEPLOYMENT_PREFIX": PREFIX,
        "MCP_API_URL": live_server.url,
        "MCP_RESOURCE_URL": RESOURCE,
        "MCP_ALLOWED_ORIGINS": f"http://127.0.0.1:{PORT_A},http://127.0.0.1:{PORT_B}",
        "MCP_SSE_RETRY_MS": "200",
    }
    started = {
        port: processes.Process(
            f"mcp-{port}",
            [sys.executable, "manage.py", "mcp", "--transport", "http", "--port", str(port)],
            env,
            logs / f"mcp-{port}.log",
        ).start()
        for port in (PORT_A, PORT_B)
    }
    try:
        for port, process in started.items():
            metadata = f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
            up = lambda url=metadata, p=process: processes.answers(url) or not p.alive()  # noqa: E731
            wait_until(up, timeout=60)
            assert process.alive(), process.log()
        yield started
    finally:
        for process in started.values():
            process.stop()
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{PREFIX}:*"):
            client.delete(key)


@pytest.fixture(autouse=True)
def shared(settings, instances):
    """This process publishes its transitions where the instances listen."""
    settings.EVENTS_URL = REDIS_URL
    settings.DEPLOYMENT_PREFIX = PREFIX
    settings.MCP_RESOURCE_URL = RESOURCE


@pytest.fixture
def mcp_resource():
    return RESOURCE


class RoundRobin(httpx2.AsyncBaseTransport):
    """Each request to the next instance; one that refuses the connection is skipped (what the
    balancer does). GET streams go to `stream_port` first, so a test knows which one to kill."""

    def __init__(self, ports: list[int], stream_port: int | None = None):
        self.ports = ports
        self.stream_port = stream_port
        self.turn = 0
        self.inner = httpx2.AsyncHTTPTransport()
        self.served: list[dict] = []

    def _order(self, method: str) -> list[int]:
        if method == "GET" and self.stream_port is not None:
            return [self.stream_port, *(p for p in self.ports if p != self.stream_port)]
        self.turn += 1
        return self.ports[self.turn % 2 :] + self.ports[: self.turn % 2]

    async def handle_async_request(self, request):
        for port in self._order(request.method):
            request.url = request.url.copy_with(port=port)
            request.headers["host"] = f"127.0.0.1:{port}"
            try:
                response = await self.inner.handle_async_request(request)
            except httpx2.ConnectError:
                continue
            body = request.content if request.method == "POST" else b""
            self.served.append(
                {
                    "port": port,
                    "method": request.method,
                    "rpc": _rpc_method(body),
                    "session": request.headers.get("mcp-session-id"),
                    "status": response.status_code,
                }
            )
            return response
        raise httpx2.ConnectError("no instance answers")

    async def aclose(self):
        await self.inner.aclose()


def _rpc_method(body: bytes) -> str | None:
    try:
        return json.loads(body).get("method") if body else None
    except ValueError:
        return None


def _client(balancer: RoundRobin, token: str, **kwargs) -> Client:
    http = httpx2.AsyncClient(transport=balancer, headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(RESOURCE, http_client=http), **kwargs)


def _read_status(user, application, make_token, *, mode: str, times: int) -> RoundRobin:
    """`get_action_status` called `times` times over one client of protocol `mode`, through
    the round-robin balancer; the balancer, to see what each instance served."""
    action = make_action(user, application)
    token = make_token(user, application, scope="read:actions")
    balancer = RoundRobin([PORT_A, PORT_B])

    async def body():
        async with _client(balancer, token.token, mode=mode) as client:
            return [
                await client.call_tool("get_action_status", {"action_id": str(action.pk)})
                for _ in range(times)
            ]

    results = run(body)
    assert [r.structured_content["status"] for r in results] == ["proposed"] * times
    return balancer


def test_a_session_opened_on_one_instance_is_served_by_the_other(user, application, make_token):
    balancer = _read_status(user, application, make_token, mode="legacy", times=4)
    [opening] = [s for s in balancer.served if s["rpc"] == "initialize"]
    session = {s["session"] for s in balancer.served if s["session"]}
    assert len(session) == 1  # one session throughout
    calls = [s for s in balancer.served if s["rpc"] == "tools/call"]
    # Opened on one instance, its tool calls answered by both.
    assert {c["port"] for c in calls} == {PORT_A, PORT_B}
    assert all(c["status"] == 200 for c in calls) and opening["status"] == 200
    # The client's DELETE at the end ended it: no record is left.
    assert not redis.Redis.from_url(REDIS_URL).exists(f"{PREFIX}:mcp:session:{session.pop()}")


def test_2026_calls_need_no_session_on_either_instance(user, application, make_token):
    balancer = _read_status(user, application, make_token, mode="2026-07-28", times=3)
    calls = [s for s in balancer.served if s["rpc"] == "tools/call"]
    assert {c["port"] for c in calls} == {PORT_A, PORT_B}
    assert not any(s["session"] for s in balancer.served)


def test_a_2026_listen_stream_hears_updates_on_either_instance(user, application, make_token):
    """subscriptions/listen is one long request on whichever instance took it; every instance
    hears every transition, so each stream gets the update."""
    action = make_action(user, application)
    token = make_token(user, application, scope="read:actions")
    balancer = RoundRobin([PORT_A, PORT_B])

    async def listen_once(client, ready):
        async with client.listen(resource_subscriptions=[action.resource_uri]) as stream:
            ready.set()
            async for event in stream:
                return event

    async def body():
        async with _client(balancer, token.token, mode="2026-07-28") as client:
            events = []
            async with anyio.create_task_group() as tg:
                for _ in range(2):  # one stream per instance
                    ready = anyio.Event()

                    async def take(ready=ready):
                        events.append(await listen_once(client, ready))

                    tg.start_soon(take)
                    await ready.wait()
                await anyio.sleep(0.2)  # both streams acknowledged past their first event
                await anyio.to_thread.run_sync(
                    lambda: touch(
                        lifecycle=Action.lifecycle, pk=action.pk, changes={"summary": "listened"}
                    )
                )
                with anyio.fail_after(20):
                    while len(events) < 2:
                        await anyio.sleep(0.05)
            return events

    events = run(body)
    assert [e.uri for e in events] == [action.resource_uri] * 2
    listens = [s for s in balancer.served if s["rpc"] == "subscriptions/listen"]
    assert {s["port"] for s in listens} == {PORT_A, PORT_B}


def test_delete_ends_the_session_everywhere_and_another_user_finds_none(
    user, other_user, application, make_token
):
    action = make_action(user, application)
    mine = make_token(user, application, scope="read:actions").token
    theirs = make_token(other_user, application, scope="read:actions").token
    url_a, url_b = RESOURCE, f"http://127.0.0.1:{PORT_B}/mcp"
    session = Session(url_a, mine)  # initialize on A (notifications/initialized too)
    call = {"name": "get_action_status", "arguments": {"action_id": str(action.pk)}}

    def on(url: str, token: str) -> requests.Response:
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call}
        headers = {**session.headers, "Authorization": f"Bearer {token}"}
        return requests.post(url, json=body, headers=headers, timeout=10)

    served_on_b = on(url_b, mine)
    assert served_on_b.status_code == 200
    assert messages(served_on_b)[0]["result"]["structuredContent"]["status"] == "proposed"
    # The same session id with another user's token: no such session, on either instance.
    assert on(url_b, theirs).status_code == 404
    assert on(url_a, theirs).status_code == 404
    record = f"{PREFIX}:mcp:session:{session.headers['Mcp-Session-Id']}"
    assert redis.Redis.from_url(REDIS_URL).exists(record)
    deleted = requests.delete(url_a, headers=session.headers, timeout=10)
    assert deleted.status_code == 200
    assert on(url_b, mine).status_code == 404
    assert on(url_a, mine).status_code == 404
    assert not redis.Redis.from_url(REDIS_URL).exists(record)


def test_a_subscription_survives_its_instance_and_the_resumed_stream_misses_nothing(
    instances, user, application, make_token
):
    """Subscribed, with the stream on A; A is SIGKILLed; two updates come while no instance
    holds the stream; the client's reconnection (Last-Event-ID) reaches B, which replays both,
    and then delivers the next one live: each update once."""
    action = make_action(user, application)
    token = make_token(user, application, scope="read:actions")
    balancer = RoundRobin([PORT_A, PORT_B], stream_port=PORT_A)
    received: list[types.ResourceUpdatedNotification] = []

    def update(n: int) -> None:
        touch(lifecycle=Action.lifecycle, pk=action.pk, changes={"summary": f"update {n}"})

    async def until(count: int) -> None:
        with anyio.fail_after(20):
            while len(received) < count:
                await anyio.sleep(0.05)

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            received.append(message)

    async def body():
        async with _client(
            balancer, token.token, mode="legacy", message_handler=on_message
        ) as client:
            await client.subscribe_resource(action.resource_uri)
            with anyio.fail_after(20):  # the GET stream is open on A
                while not any(s["method"] == "GET" for s in balancer.served):
                    await anyio.sleep(0.05)
            await anyio.sleep(0.2)  # the stream registered past its headers
            await anyio.to_thread.run_sync(update, 1)
            await until(1)
            instances[PORT_A].kill()
            for n in (2, 3):
                await anyio.to_thread.run_sync(update, n)
            await until(3)  # replayed by B after the client's reconnection
            await anyio.to_thread.run_sync(update, 4)
            await until(4)  # live on B
            # A tool call still works: the balancer sends it to B.
            return await client.call_tool("get_action_status", {"action_id": str(action.pk)})

    result = run(body)
    assert result.structured_content["status"] == "proposed"
    assert [str(m.params.uri) for m in received] == [action.resource_uri] * 4
    events = [m.params.meta[EVENT_META_KEY] for m in received]
    assert len(set(events)) == 4  # four updates, each once
    resumed = [s for s in balancer.served if s["method"] == "GET" and s["port"] == PORT_B]
    assert resumed and resumed[0]["status"] == 200
