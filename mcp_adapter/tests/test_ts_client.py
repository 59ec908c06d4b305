"""The official TypeScript SDK client (mcp_adapter/conformance/client.mjs, the SDK pinned in the
lock file) against the real streamable-HTTP app with a pasted token: it lists the tools, calls
every read tool and the status tools (the SDK checks structuredContent against each tool's
outputSchema, and so does this test), subscribes to picnic://action/{id} and receives the
update of a real transition this test drives; and it starts a generation operation as a task
and follows it through a staff review in the console to its result."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import uuid
from urllib.parse import urlsplit

import jsonschema
import pytest

from actions.execution.signing import action_reject
from dev.providers.local_openai import LocalResponsesServer
from mcp_adapter.api import PicnicApi
from mcp_adapter.models import McpTask
from mcp_adapter.server import PicnicMCP
from mcp_adapter.tests.conftest import HttpServer
from mcp_adapter.tests.test_conformance import NODE, NPM_DIR, SUITE
from mcp_adapter.tools import TOOLS_BY_NAME
from operations import billing
from operations.models import Operation, State, Wallet
from operations.services import operations_process_due
from operations.tests.factories import fund, submit_operation

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.node]
SCOPES = (
    "read:actions read:accounts read:balances read:card read:transactions read:profile "
    "agent:dm_read operations:read"
)
READ_TOOLS = ["get_transactions", "get_smart_accounts", "get_balances", "get_card", "get_profile"]


def start_client(url: str, token: str, **instructions: str) -> subprocess.Popen:
    """The TypeScript SDK client (client.mjs) against the MCP server at `url`; `instructions`
    are its MCP_* variables (the calls to make, what to subscribe to)."""
    return subprocess.Popen(
        [str(NODE), "client.mjs"],
        cwd=NPM_DIR,
        env={**os.environ, "MCP_URL": url, "MCP_TOKEN": token, **instructions},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_lines(process: subprocess.Popen, until: str, deadline: float, between=None) -> list[dict]:
    """JSON lines from the script up to and including the first of event `until`; `between`
    runs every 0.2 s meanwhile (the beat's work, while the script polls)."""
    lines = []
    ticked = 0.0
    while time.monotonic() < deadline:
        if between is not None and time.monotonic() - ticked >= 0.2:
            between()
            ticked = time.monotonic()
        ready, _, _ = select.select([process.stdout], [], [], 0.2)
        if not ready:
            if process.poll() is not None:
                break
            continue
        line = process.stdout.readline()
        if not line:
            break
        lines.append(json.loads(line))
        if lines[-1]["event"] == until:
            return lines
    process.kill()
    pytest.fail(f"no {until!r} from the TS client: {lines} {process.stderr.read()[-3000:]}")


@pytest.fixture
def operation(user, application):
    fund(user)
    return submit_operation(owner=user, application=application, category="sensitive")


def test_the_typescript_sdk_client_reads_calls_and_follows_an_action(
    live_server,
    settings,
    events_dir,
    mcp_resource,
    action,
    operation,
    user,
    application,
    make_token,
    workspace,
    social_account,
):
    from messaging.models import Membership, Role
    from messaging.services import delivery_send

    if not SUITE.exists():
        pytest.fail("mcp_adapter/conformance/node_modules is missing: run `make deps`")
    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
    dm_key = uuid.uuid4()
    delivery_send(
        user=user,
        application=application,
        workspace_id=workspace.pk,
        social_account_id=social_account.pk,
        recipient_id="12345",
        text="hello",
        idempotency_key=dm_key,
    )
    token = make_token(user, application, scope=SCOPES)
    port = urlsplit(mcp_resource).port  # where the token is bound (RFC 8707)
    settings.MCP_API_URL = live_server.url
    settings.MCP_ALLOWED_ORIGINS = [f"http://127.0.0.1:{port}"]
    server = PicnicMCP(http=True, output_schemas=True, api=PicnicApi(live_server.url))
    calls = [[name, {}] for name in READ_TOOLS] + [
        ["get_action_status", {"action_id": str(action.pk)}],
        [
            "sosoapi_dm_actions_status",
            {
                "workspace_id": str(workspace.pk),
                "social_account_id": str(social_account.pk),
                "idempotency_key": str(dm_key),
            },
        ],
        ["tong_operation_status", {"operation_id": str(operation.pk)}],
    ]
    with HttpServer(server, port) as http:
        process = start_client(
            http.url,
            token.token,
            MCP_CALLS=json.dumps(calls),
            MCP_SUBSCRIBE=action.resource_uri,
        )
        deadline = time.monotonic() + 60
        lines = read_lines(process, "subscribed", deadline)
        # The user declines on the signing page: a real transition, published after commit.
        action_reject(action_id=action.pk, user=user)
        lines += read_lines(process, "updated", deadline)
        assert process.wait(timeout=10) == 0, process.stderr.read()[-3000:]

    connected = lines[0]
    assert connected["serverInfo"] == {"name": "picnic", "version": "1.0.0"}
    assert connected["protocolVersion"] == "2025-11-25"
    assert "prompts" not in connected["capabilities"]
    tools = {t["name"]: t for t in lines[1]["tools"]}
    assert set(tools) == set(TOOLS_BY_NAME)
    results = {line["tool"]: line for line in lines if line["event"] == "call"}
    assert set(results) == {name for name, _ in calls}
    outcomes = {}
    for name, result in results.items():
        assert "thrown" not in result, result
        if result.get("isError"):
            outcomes[name] = result["content"][0]["text"]
            continue
        # What the TS client saw in tools/list, checked again here.
        jsonschema.validate(result["structuredContent"], tools[name]["outputSchema"])
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
        outcomes[name] = "ok"
    assert outcomes == {
        "get_transactions": "ok",
        "get_smart_accounts": "ok",
        "get_balances": "ok",
        "get_card": "No Picnic card for this user",
        "get_profile": "ok",
        "get_action_status": "ok",
        "sosoapi_dm_actions_status": "ok",
        "tong_operation_status": "ok",
    }
    assert results["get_action_status"]["structuredContent"]["status"] == "proposed"
    updated = lines[-1]
    assert updated["uri"] == action.resource_uri
    assert json.loads(updated["contents"][0]["text"])["status"] == "rejected"


def test_the_typescript_sdk_client_starts_an_operation_as_a_task_through_review(
    live_server, settings, events_dir, mcp_resource, user, application, make_token, staff_client
):
    """The TS client quotes, then starts with that quote as a task (a task-augmented
    tools/call on 2025-11-25 through the SDK's Tasks support) and polls it: it waits for a
    reviewer until staff approve in the console (a POST to the console's bulk apply), then
    generates against the local backend and completes; the client reads the result, and a
    repeat of the start's key returns the same operation. The SDK checks every structured
    answer against the tools' outputSchemas, and so does this test."""
    if not SUITE.exists():
        pytest.fail("mcp_adapter/conformance/node_modules is missing: run `make deps`")
    settings.OPERATIONS_REVIEW_RULES = ["category:reviewed"]
    settings.MCP_TASK_POLL_INTERVAL_MS = 100
    fund(user)
    key = str(uuid.uuid4())
    token = make_token(user, application, scope="operations:read operations:write")
    port = urlsplit(mcp_resource).port
    settings.MCP_API_URL = live_server.url
    settings.MCP_ALLOWED_ORIGINS = [f"http://127.0.0.1:{port}"]
    server = PicnicMCP(http=True, output_schemas=True, api=PicnicApi(live_server.url))
    quote = {"tool": "text-gen", "submit_field": "prompt", "submit_value": "A haiku"}
    start = {
        "tool": "text-gen",
        "category": "reviewed",
        "quote_id": "$tong_operation_quote.id",
        "idempotency_key": key,
    }
    with (
        LocalResponsesServer(api_key="k", work_seconds=0.2) as backend,
        HttpServer(server, port) as http,
    ):
        settings.OPERATIONS_BACKEND_URL, settings.OPERATIONS_BACKEND_API_KEY = backend.url, "k"
        settings.OPERATIONS_POLL_SECONDS = 0.0
        process = start_client(
            http.url,
            token.token,
            MCP_CALLS=json.dumps([["tong_operation_quote", quote]]),
            MCP_TASK=json.dumps(["tong_operation_start", start]),
            MCP_AFTER=json.dumps(
                [
                    ["tong_operation_result", {"operation_id": "$task.id"}],
                    ["tong_operation_start", start],
                ]
            ),
        )
        deadline = time.monotonic() + 60
        lines = []
        while not any(
            line["event"] == "task_status"
            and line["task"]["statusMessage"].startswith("Waiting for a reviewer")
            for line in lines
        ):
            lines += read_lines(process, "task_status", deadline)
        operation = Operation.objects.get(owner=user)
        assert operation.state == State.NEEDS_REVIEW
        # Staff approve in the console, as a reviewer would.
        page = staff_client.post(
            "/staff/bulk/apply/",
            {"move": "operation:approve", "key": [f"operation:{operation.pk}"], "note": "fine"},
        )
        assert page.status_code == 200, page.text
        # The beat dispatches and follows it while the client polls.
        lines += read_lines(process, "task_result", deadline, between=operations_process_due)
        lines += read_lines(process, "call", deadline)  # the result
        lines += read_lines(process, "call", deadline)  # the repeated start
        assert process.wait(timeout=10) == 0, process.stderr.read()[-3000:]

    tools = {t["name"]: t for t in lines[1]["tools"]}
    quoted = lines[2]
    assert quoted["tool"] == "tong_operation_quote" and not quoted.get("isError"), quoted
    jsonschema.validate(quoted["structuredContent"], tools["tong_operation_quote"]["outputSchema"])
    (created,) = [line["task"] for line in lines if line["event"] == "task_created"]
    assert created["status"] == "working"
    polled = [line["task"] for line in lines if line["event"] == "task_status"]
    assert {t["taskId"] for t in polled} == {created["taskId"]}
    messages = [t["statusMessage"] for t in polled]
    assert any("review required by category:reviewed" in m for m in messages)
    assert polled[-1]["status"] == "completed" and messages[-1].startswith("Succeeded;")
    (result,) = [line for line in lines if line["event"] == "task_result"]
    assert not result.get("isError"), result
    final = result["structuredContent"]
    jsonschema.validate(final, tools["tong_operation_start"]["outputSchema"])
    assert final["state"] == "succeeded" and final["channel"] == "mcp"
    read, repeat = [line for line in lines if line["event"] == "call"][1:]
    assert not read.get("isError") and not repeat.get("isError"), (read, repeat)
    jsonschema.validate(read["structuredContent"], tools["tong_operation_result"]["outputSchema"])
    assert read["structuredContent"]["ready"] is True
    operation = Operation.objects.get(owner=user)
    assert read["structuredContent"]["result"] == operation.result
    assert read["structuredContent"]["result"]["output_text"]
    assert repeat["structuredContent"]["id"] == final["id"] == str(operation.pk)
    assert str(operation.quote_id) == quoted["structuredContent"]["id"]
    assert operation.idempotency_key == key and operation.state == State.SUCCEEDED
    history = list(operation.history.order_by("timestamp", "id").values_list("status", flat=True))
    assert history[:3] == ["queued", "needs_review", "queued"] and history[-1] == "succeeded"
    approval = operation.history.get(from_status="needs_review", status="queued")
    assert approval.actor_kind == "staff" and approval.actor_user.username == "sam"
    assert McpTask.objects.get(pk=created["taskId"]).status == "completed"
    assert len(backend.creates) == 1
    assert billing.invariants(operation) == []
    assert billing.wallet_invariants(Wallet.objects.get(owner=user)) == []
