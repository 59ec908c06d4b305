"""MCP tasks as raw JSON-RPC on the real transports (streamable HTTP with bearer tokens, and
`manage.py mcp --transport stdio` as a subprocess), for both revisions: every method, the error
codes, TTL expiry, another user's and another client's task, a server restart in the middle of
a task, cancellation through the existing services, and pushed status changes."""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.conf import settings as django_settings
from django.utils import timezone

from actions.execution.models import ActionStatus
from core.lifecycle import Actor
from dev.testing import database_url
from mcp_adapter import task_store
from mcp_adapter.models import McpTask
from mcp_adapter.tests.conftest import DM_SCOPES, close_stream, open_get_stream
from messaging.models import Delivery, DeliveryStatus
from messaging.services import delivery_transition

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(django_settings.BASE_DIR)
LEGACY, MODERN = "2025-11-25", "2026-07-28"
EXTENSION = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _message(response: requests.Response, request_id) -> dict:
    """The JSON-RPC answer to `request_id`: the JSON body, or its frame in an SSE body (2026
    answers an error with an HTTP status of its kind, e.g. 404 for -32601)."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            if message.get("id") == request_id:
                return message
    raise AssertionError(f"no answer to {request_id} in {response.text!r}")


class HttpRpc:
    """Raw JSON-RPC over streamable HTTP: 2025-11-25 with the handshake and a session,
    2026-07-28 with the per-request `_meta` envelope and routing headers."""

    def __init__(self, url: str, token: str, version: str, *, tasks: bool = True):
        self.url, self.version, self.tasks = url, version, tasks
        self.headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        self.ids = itertools.count(1)
        self.session_id = None
        if version == LEGACY:
            init = self.call(
                "initialize",
                {
                    "protocolVersion": LEGACY,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            )
            self.capabilities = init["result"]["capabilities"]
            self.notify("notifications/initialized")

    def _headers(self, method: str, params: dict) -> dict:
        headers = dict(self.headers)
        headers["MCP-Protocol-Version"] = self.version
        if self.version == LEGACY:
            if self.session_id:
                headers["Mcp-Session-Id"] = self.session_id
            return headers
        headers["Mcp-Method"] = method
        name = params.get("name") if method == "tools/call" else params.get("taskId")
        if name:
            headers["Mcp-Name"] = name
        return headers

    def _params(self, params: dict | None, tasks: bool | None = None) -> dict:
        params = dict(params or {})
        if self.version == MODERN:
            declared = self.tasks if tasks is None else tasks
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": (
                    {"extensions": {EXTENSION: {}}} if declared else {}
                ),
                **params.get("_meta", {}),
            }
        return params

    def call(
        self,
        method: str,
        params: dict | None = None,
        *,
        tasks: bool | None = None,
        timeout: float = 15,
    ):
        params = self._params(params, tasks)
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        response = requests.post(
            self.url, json=body, headers=self._headers(method, params), timeout=timeout
        )
        if method == "initialize":
            self.session_id = response.headers.get("mcp-session-id")
        return _message(response, body["id"])

    def notify(self, method: str, params: dict | None = None) -> None:
        body = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        response = requests.post(
            self.url, json=body, headers=self._headers(method, params or {}), timeout=15
        )
        assert response.status_code == 202, response.text


def _send(delivery_id, *steps: str) -> None:
    """The worker's moves, with the real transition function (events published on commit)."""
    for to in steps:
        updates = {"provider_message_id": "m-1"} if to == DeliveryStatus.SENT else None
        delivery_transition(delivery_id=delivery_id, to=to, actor=Actor.worker(), updates=updates)


def test_2025_11_25_over_http_every_method(
    http_server,
    dm,
    user,
    application,
    other_user,
    make_application,
    make_token,
):
    with http_server() as http:
        rpc = HttpRpc(http.url, dm.token.token, LEGACY)
        assert rpc.capabilities["tasks"] == {
            "list": {},
            "cancel": {},
            "requests": {"tools": {"call": {}}},
        }
        assert "extensions" not in rpc.capabilities  # the 2026 form is not on this wire
        tools = {t["name"]: t for t in rpc.call("tools/list")["result"]["tools"]}
        assert tools["sosoapi_dm_actions_send"]["execution"] == {"taskSupport": "optional"}
        assert tools["transfer"]["execution"] == {"taskSupport": "optional"}
        assert "execution" not in tools["get_profile"]  # forbidden, the default

        # A tool that is not task-capable, called as a task: -32601.
        refused = rpc.call("tools/call", {"name": "get_profile", "arguments": {}, "task": {}})
        assert refused["error"]["code"] == -32601

        # Refused at once (bad input): a task that failed at birth, its result the refusal.
        bad = rpc.call(
            "tools/call",
            {"name": "sosoapi_dm_actions_send", "arguments": {**dm(), "text": 5}, "task": {}},
        )["result"]["task"]
        assert bad["status"] == "failed" and "text" in bad["statusMessage"]
        refusal = rpc.call("tasks/result", {"taskId": bad["taskId"]})["result"]
        assert refusal["isError"] is True and refusal["_meta"][RELATED]["taskId"] == bad["taskId"]
        created = rpc.call(
            "tools/call",
            {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": {"ttl": 60000}},
        )["result"]
        task = created["task"]
        assert task["status"] == "working" and task["ttl"] == 60000
        assert task["statusMessage"] == "Queued; waiting for a worker to send it."
        assert created["_meta"]["io.modelcontextprotocol/model-immediate-response"]
        row = McpTask.objects.get(pk=task["taskId"])
        assert (row.user, row.application, row.tool) == (
            user,
            application,
            "sosoapi_dm_actions_send",
        )

        got = rpc.call("tasks/get", {"taskId": task["taskId"]})["result"]
        assert got["taskId"] == task["taskId"] and got["status"] == "working"
        assert got["createdAt"].endswith("Z") and got["pollInterval"] == 5000
        listed = rpc.call("tasks/list")["result"]
        assert [t["taskId"] for t in listed["tasks"]] == [task["taskId"], bad["taskId"]]
        assert "nextCursor" not in listed

        # Cancelling the queued delivery: the task and the delivery end cancelled.
        cancelled = rpc.call("tasks/cancel", {"taskId": task["taskId"]})["result"]
        assert cancelled["status"] == "cancelled"
        delivery = Delivery.objects.get(pk=row.entity_id)
        assert delivery.status == DeliveryStatus.CANCELLED
        last = delivery.history.order_by("-timestamp", "-id").first()
        assert application.client_id in last.detail and "tasks/cancel" in last.detail
        again = rpc.call("tasks/cancel", {"taskId": task["taskId"]})["error"]
        assert again["code"] == -32602
        assert again["message"] == "Cannot cancel task: already in terminal status 'cancelled'"
        result = rpc.call("tasks/result", {"taskId": task["taskId"]})["result"]
        assert result["isError"] is True
        assert result["structuredContent"]["action"]["status"] == "cancelled"
        assert result["_meta"][RELATED] == {"taskId": task["taskId"]}

        # tasks/result blocks until the end: the worker sends the message meanwhile.
        second = rpc.call(
            "tools/call", {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": {}}
        )["result"]["task"]
        assert second["ttl"] == django_settings.MCP_TASK_DEFAULT_TTL_MS
        entity = McpTask.objects.get(pk=second["taskId"]).entity_id
        timer = threading.Timer(0.3, _send, (entity, "claimed", "sending", "sent"))
        timer.start()
        done = rpc.call("tasks/result", {"taskId": second["taskId"]})["result"]
        timer.join()
        assert done["isError"] is False and done["structuredContent"]["action"]["status"] == "sent"
        finished = rpc.call("tasks/get", {"taskId": second["taskId"]})["result"]
        assert finished["status"] == "completed"
        # A sent message cannot be cancelled any more.
        late = rpc.call("tasks/cancel", {"taskId": second["taskId"]})["error"]
        assert late["code"] == -32602

        # Errors: unknown id, malformed id, bad cursor, a method of the other revision.
        for params in ({"taskId": str(uuid.uuid4())}, {"taskId": "../x"}):
            error = rpc.call("tasks/get", params)["error"]
            assert error == {
                **error,
                "code": -32602,
                "message": "Failed to retrieve task: Task not found",
            }
        assert rpc.call("tasks/list", {"cursor": "nope"})["error"]["code"] == -32602
        # Hostile shapes: a clear -32602, never a crash.
        for method, params in (
            ("tasks/get", {}),
            ("tasks/get", {"taskId": 5}),
            ("tasks/cancel", {"taskId": ["x"]}),
            ("tasks/result", {"taskId": "\x00"}),
            ("tasks/list", {"cursor": "A" * 10000}),
            ("tools/call", {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": "x"}),
        ):
            assert rpc.call(method, params)["error"]["code"] == -32602, (method, params)
        assert rpc.call("tasks/update", {"taskId": second["taskId"]})["error"]["code"] == -32601

        # Another user with the same client, and the same user with another client: refused,
        # and their lists are empty.
        for token in (
            make_token(other_user, application, scope=DM_SCOPES),
            make_token(user, make_application("other-agent"), scope=DM_SCOPES),
        ):
            intruder = HttpRpc(http.url, token.token, LEGACY)
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                error = intruder.call(method, {"taskId": second["taskId"]})["error"]
                assert error["code"] == -32602 and "Task not found" in error["message"]
            assert intruder.call("tasks/list")["result"]["tasks"] == []


def test_2026_07_28_over_http_every_method(http_server, dm):
    with http_server() as http:
        rpc = HttpRpc(http.url, dm.token.token, MODERN)
        discovered = rpc.call("server/discover")["result"]
        assert discovered["capabilities"]["extensions"][EXTENSION] == {}
        assert "tasks" not in discovered["capabilities"]  # the 2025 form is not on this wire

        # Without the extension declared on the request: the plain tool result.
        plain = rpc.call(
            "tools/call", {"name": "sosoapi_dm_actions_send", "arguments": dm()}, tasks=False
        )["result"]
        assert plain["resultType"] == "complete" and plain["isError"] is False
        # With it: a task (the server decides; the 2025 `task` param is ignored).
        created = rpc.call(
            "tools/call",
            {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": {"ttl": 5}},
        )["result"]
        assert created["resultType"] == "task" and created["status"] == "working"
        assert created["ttlMs"] == django_settings.MCP_TASK_DEFAULT_TTL_MS
        assert created["pollIntervalMs"] == 5000
        task_id = created["taskId"]
        # A refused call is answered at once, not as a task.
        refused = rpc.call(
            "tools/call", {"name": "sosoapi_dm_actions_send", "arguments": {**dm(), "text": 5}}
        )["result"]
        assert refused["resultType"] == "complete" and refused["isError"] is True

        got = rpc.call("tasks/get", {"taskId": task_id})["result"]
        assert got["resultType"] == "complete" and got["status"] == "working"
        assert "result" not in got
        ack = rpc.call("tasks/update", {"taskId": task_id, "inputResponses": {"k": {}}})["result"]
        assert ack["resultType"] == "complete" and set(ack) <= {"resultType", "_meta"}
        entity = McpTask.objects.get(pk=task_id).entity_id
        _send(entity, "claimed", "sending", "unknown")
        unknown = rpc.call("tasks/get", {"taskId": task_id})["result"]
        # Not known is not success: a completed task whose result is an error saying so.
        assert unknown["status"] == "completed" and unknown["result"]["isError"] is True
        assert "Do not re-send" in unknown["result"]["content"][0]["text"]
        assert unknown["result"]["structuredContent"]["action"]["status"] == "unknown"
        # One way: staff resolving it later does not rewrite the task.
        delivery_transition(
            delivery_id=entity,
            to="sent",
            actor=Actor.system(),
            updates={"provider_message_id": "x"},
        )
        assert rpc.call("tasks/get", {"taskId": task_id})["result"]["result"]["isError"] is True

        # Cancel: an acknowledgement; the task reads cancelled afterwards.
        other = rpc.call("tools/call", {"name": "sosoapi_dm_actions_send", "arguments": dm()})[
            "result"
        ]["taskId"]
        assert rpc.call("tasks/cancel", {"taskId": other})["result"]["resultType"] == "complete"
        assert rpc.call("tasks/get", {"taskId": other})["result"]["status"] == "cancelled"

        # Methods this revision does not have, unknown ids, and listening without the extension.
        assert rpc.call("tasks/result", {"taskId": task_id})["error"]["code"] == -32601
        assert rpc.call("tasks/list")["error"]["code"] == -32601
        assert rpc.call("tasks/get", {"taskId": str(uuid.uuid4())})["error"]["code"] == -32602
        bad = rpc.call("subscriptions/listen", {"notifications": {"taskIds": "all"}})["error"]
        assert bad["code"] == -32602
        error = rpc.call(
            "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}, tasks=False
        )["error"]
        assert error["code"] == -32021
        assert error["data"] == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}


def test_ttl_is_enforced_and_expired_tasks_are_purged(http_server, dm):
    with http_server() as http:
        rpc = HttpRpc(http.url, dm.token.token, LEGACY)
        task = rpc.call(
            "tools/call",
            {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": {"ttl": 1}},
        )["result"]["task"]
        assert task["ttl"] == 1000  # our floor
        McpTask.objects.filter(pk=task["taskId"]).update(
            expires_at=timezone.now() - timedelta(seconds=1)
        )
        error = rpc.call("tasks/get", {"taskId": task["taskId"]})["error"]
        assert error["code"] == -32602
        assert error["message"] == "Failed to retrieve task: Task has expired"
        assert rpc.call("tasks/list")["result"]["tasks"] == []
        assert rpc.call("tasks/cancel", {"taskId": task["taskId"]})["error"]["code"] == -32602
    assert task_store.tasks_purge_expired() == 1
    assert not McpTask.objects.filter(pk=task["taskId"]).exists()
    # The delivery itself is the messaging app's: untouched by the purge.
    assert Delivery.objects.filter(status=DeliveryStatus.QUEUED).count() == 1


def test_an_action_task_follows_the_action_and_cancel_rejects_it(
    http_server,
    user,
    application,
    make_token,
):
    from mcp_adapter.tests.conftest import make_action

    token = make_token(user, application, scope="read:actions write:actions")
    context = task_store.auth_context_for_token(token.token)
    action = make_action(user, application)
    # The store over an action the tool proposed (the tool's own path needs a card or a chain).
    task = task_store.task_create(
        context=context,
        tool="card_freeze",
        protocol_version=LEGACY,
        ttl_ms=60000,
        result={"structuredContent": {"action_id": str(action.pk)}, "isError": False},
    )
    assert task.status == "working" and "passkey signature at http" in task.status_message
    assert f"/sign/{action.pk}" in task.status_message or str(action.pk) in task.status_message
    with http_server() as http:
        rpc = HttpRpc(http.url, token.token, LEGACY)
        assert rpc.call("tasks/cancel", {"taskId": str(task.pk)})["result"]["status"] == "cancelled"
    action.refresh_from_db()
    assert action.status == ActionStatus.REJECTED
    last = action.history.order_by("-timestamp", "-id").first()
    assert last.actor_kind == "agent" and application.client_id in last.detail
    # An action already broadcast cannot be withdrawn: refused in words.
    broadcast = make_action(user, application)
    type(broadcast).objects.filter(pk=broadcast.pk).update(status=ActionStatus.BROADCAST)
    task = task_store.task_create(
        context=context,
        tool="transfer",
        protocol_version=MODERN,
        ttl_ms=60000,
        result={"structuredContent": {"action_id": str(broadcast.pk)}, "isError": False},
    )
    with pytest.raises(task_store.TaskNotCancellable, match="already broadcast"):
        task_store.task_cancel(context=context, task_id=task.pk)


def test_a_status_change_is_pushed_to_the_listening_session(http_server, dm):
    """notifications/tasks/status on the 2025 session's GET stream, for each transition of the
    delivery behind the task; latencies (publish to receipt) printed for docs/benchmarks.md."""
    with http_server() as http:
        rpc = HttpRpc(http.url, dm.token.token, LEGACY)
        received: queue.Queue = queue.Queue()
        stream = open_get_stream(http.url, rpc, LEGACY)

        def read():
            try:
                for line in stream.iter_lines(decode_unicode=True):
                    if line and line.startswith("data:"):
                        received.put((time.monotonic(), json.loads(line[5:])))
            except (requests.RequestException, AttributeError):
                pass  # closed by the test

        threading.Thread(target=read, daemon=True).start()
        latencies = []
        for _ in range(7):
            task = rpc.call(
                "tools/call",
                {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": {}},
            )["result"]["task"]
            entity = McpTask.objects.get(pk=task["taskId"]).entity_id
            for step, expected in (
                ("claimed", "working"),
                ("sending", "working"),
                ("sent", "completed"),
            ):
                start = time.monotonic()
                _send(entity, step)
                while True:
                    at, message = received.get(timeout=5)
                    params = message.get("params", {})
                    if (
                        message.get("method") == "notifications/tasks/status"
                        and params.get("taskId") == task["taskId"]
                        and params["lastUpdatedAt"] != task["lastUpdatedAt"]
                    ):
                        break
                assert params["status"] == expected
                task = params
                latencies.append(at - start)
        close_stream(stream)
    latencies.sort()
    p95 = latencies[int(0.95 * (len(latencies) - 1))]
    print(
        f"task push latency over {len(latencies)} transitions: p50 "
        f"{latencies[len(latencies) // 2] * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms"
    )


class StdioRpc:
    """`manage.py mcp --transport stdio` as a subprocess, spoken to in raw JSON lines."""

    def __init__(self, env: dict):
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "mcp", "--transport", "stdio"],
            cwd=str(ROOT),
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ids = itertools.count(1)

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def call(self, method: str, params: dict | None = None) -> dict:
        request_id = next(self.ids)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        while True:
            line = self.process.stdout.readline()
            assert line, "the stdio server ended"
            message = json.loads(line)
            if message.get("id") == request_id:
                return message

    def initialize(self) -> dict:
        init = self.call(
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=15)


def test_stdio_both_revisions_and_a_restart_in_the_middle_of_a_task(live_server, dm, tmp_path):
    env = {
        **os.environ,
        "PICNIC_MCP_TOKEN": dm.token.token,
        "MCP_API_URL": live_server.url,
        "EVENTS_DIR": str(tmp_path / "events"),
        "DATABASE_URL": database_url(),  # the test database
    }
    first = StdioRpc(env)
    try:
        assert "tasks" in first.initialize()["result"]["capabilities"]
        answer = first.call(
            "tools/call", {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": {}}
        )
        assert "result" in answer, answer
        task = answer["result"]["task"]
    finally:
        first.stop()  # the server goes away with the task still working
    entity = McpTask.objects.get(pk=task["taskId"]).entity_id
    _send(entity, "claimed", "sending", "sent")  # while no MCP server runs at all

    second = StdioRpc(env)
    try:
        second.initialize()
        got = second.call("tasks/get", {"taskId": task["taskId"]})["result"]
        assert got["status"] == "completed" and got["createdAt"] == task["createdAt"]
        result = second.call("tasks/result", {"taskId": task["taskId"]})["result"]
        assert result["structuredContent"]["action"]["status"] == "sent"
        assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
    finally:
        second.stop()

    # 2026-07-28 on stdio: no handshake, the envelope in each request's _meta.
    modern = StdioRpc(env)
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
    }
    try:
        created = modern.call(
            "tools/call",
            {"name": "sosoapi_dm_actions_send", "arguments": dm(), "_meta": meta},
        )["result"]
        assert created["resultType"] == "task"
        got = modern.call("tasks/get", {"taskId": created["taskId"], "_meta": meta})["result"]
        assert got["status"] == "working"
        ack = modern.call("tasks/cancel", {"taskId": created["taskId"], "_meta": meta})
        assert ack["result"]["resultType"] == "complete"
        got = modern.call("tasks/get", {"taskId": task["taskId"], "_meta": meta})["result"]
        assert got["status"] == "completed" and got["result"]["isError"] is False
    finally:
        modern.stop()


def test_2026_07_28_listen_stream_carries_task_status(
    http_server,
    dm,
    other_user,
    application,
    make_token,
):
    """subscriptions/listen with taskIds: acknowledged with the caller's own tasks only, then
    one `notifications/tasks` (the full DetailedTask) per transition of the delivery."""
    with http_server() as http:
        rpc = HttpRpc(http.url, dm.token.token, MODERN)
        task_id = rpc.call("tools/call", {"name": "sosoapi_dm_actions_send", "arguments": dm()})[
            "result"
        ]["taskId"]
        intruder = HttpRpc(
            http.url, make_token(other_user, application, scope=DM_SCOPES).token, MODERN
        )
        params = rpc._params({"notifications": {"taskIds": [task_id, str(uuid.uuid4())]}})
        body = {"jsonrpc": "2.0", "id": 99, "method": "subscriptions/listen", "params": params}
        frames: queue.Queue = queue.Queue()

        def listen(client: HttpRpc, request: dict) -> requests.Response:
            response = requests.post(
                http.url,
                json=request,
                headers=client._headers("subscriptions/listen", request["params"]),
                stream=True,
                timeout=30,
            )
            assert response.status_code == 200

            def read():
                try:
                    for line in response.iter_lines(decode_unicode=True):
                        if line and line.startswith("data:"):
                            frames.put((client, json.loads(line[5:])))
                except (requests.RequestException, AttributeError):
                    pass  # closed by the test

            threading.Thread(target=read, daemon=True).start()
            return response

        mine = listen(rpc, body)
        theirs = listen(intruder, {**body, "id": 98})
        acks = {}
        while len(acks) < 2:
            client, frame = frames.get(timeout=5)
            assert frame["method"] == "notifications/subscriptions/acknowledged"
            acks[client] = frame["params"]
        assert acks[rpc]["notifications"]["taskIds"] == [task_id]
        assert acks[rpc]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 99
        assert acks[intruder]["notifications"]["taskIds"] == []
        entity = McpTask.objects.get(pk=task_id).entity_id
        seen = []
        for step in ("claimed", "sending", "sent"):  # one at a time: each state is seen
            _send(entity, step)
            client, frame = frames.get(timeout=5)
            assert client is rpc, "another user's stream got a task notification"
            assert frame["method"] == "notifications/tasks"
            seen.append(frame["params"])
        assert [f["status"] for f in seen] == ["working", "working", "completed"]
        assert seen[1]["statusMessage"] == "Sending to the provider."
        assert seen[-1]["result"]["structuredContent"]["action"]["status"] == "sent"
        assert seen[-1]["taskId"] == task_id
        close_stream(mine)
        close_stream(theirs)


def test_the_official_sdk_client_follows_a_task_through_its_extension_hook(
    http_server,
    dm,
):
    """mcp 2.3's Client has no tasks of its own, but lets an extension claim a `resultType`
    and resolve it (SEP-2663: a client may drive the polling itself and hand back the final
    CallToolResult). With that hook the plain `call_tool` returns the delivery's end."""
    from typing import Any

    import anyio
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from mcp.client.streamable_http import streamable_http_client
    from mcp_operation import (  # docs/examples: the models the example polls with
        GetTask,
        TaskHandle,
    )
    from pydantic import TypeAdapter

    from mcp_adapter.tests.conftest import run

    polled: list[str] = []
    first_poll = threading.Event()

    async def resolve(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
        while True:
            task = await ctx.session.send_request(
                GetTask(params={"taskId": handle.task_id}), TypeAdapter(dict[str, Any])
            )
            polled.append(task["status"])
            first_poll.set()
            if task["status"] == "completed":
                return types.CallToolResult.model_validate(task["result"])
            if task["status"] in ("failed", "cancelled"):
                raise AssertionError(task)
            await anyio.sleep(0.1)

    class Tasks(ClientExtension):
        identifier = EXTENSION

        def claims(self):
            return [ResultClaim(result_type="task", model=TaskHandle, resolve=resolve)]

    def worker():  # the delivery is sent once the client has seen it working
        assert first_poll.wait(timeout=10)
        _send(McpTask.objects.get().entity_id, "claimed", "sending", "sent")

    async def call(url):
        headers = {"Authorization": f"Bearer {dm.token.token}"}
        async with httpx2.AsyncClient(headers=headers) as http_client:
            transport = streamable_http_client(url, http_client=http_client)
            async with Client(transport, extensions=[Tasks()]) as client:
                return await client.call_tool("sosoapi_dm_actions_send", dm())

    with http_server() as http:
        thread = threading.Thread(target=worker)
        thread.start()
        result = run(call, http.url)
        thread.join()
    assert result.is_error is False
    assert result.structured_content["action"]["status"] == "sent"
    assert polled[0] == "working" and polled[-1] == "completed"
    assert McpTask.objects.get().protocol_version == MODERN


def test_a_client_has_at_most_mcp_task_max_live_tasks_in_progress(
    http_server,
    dm,
):
    with http_server(MCP_TASK_MAX_LIVE=1) as http:
        legacy = HttpRpc(http.url, dm.token.token, LEGACY)
        modern = HttpRpc(http.url, dm.token.token, MODERN)
        call = {"name": "sosoapi_dm_actions_send", "task": {}}
        first = legacy.call("tools/call", {**call, "arguments": dm()})["result"]["task"]
        refused = legacy.call("tools/call", {**call, "arguments": dm()})["error"]
        assert refused["code"] == -32600 and "Too many tasks in progress" in refused["message"]
        # 2026-07-28: the server just answers without a task (the message is still queued).
        plain = modern.call("tools/call", {**call, "arguments": dm()})["result"]
        assert plain["resultType"] == "complete" and plain["isError"] is False
        assert McpTask.objects.count() == 1 and Delivery.objects.count() == 2
    # The first one ends while no MCP server runs (nobody re-projects the row) …
    _send(McpTask.objects.get(pk=first["taskId"]).entity_id, "claimed", "sending", "sent")
    assert McpTask.objects.get(pk=first["taskId"]).status == "working"
    # … and still makes room: the count re-reads the work behind the rows at the limit.
    with http_server(MCP_TASK_MAX_LIVE=1) as http:
        legacy = HttpRpc(http.url, dm.token.token, LEGACY)
        again = legacy.call("tools/call", {**call, "arguments": dm()})["result"]["task"]
        assert again["status"] == "working"
    assert McpTask.objects.get(pk=first["taskId"]).status == "completed"
