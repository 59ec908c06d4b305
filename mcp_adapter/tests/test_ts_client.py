"""The official TypeScript SDK client (mcp_adapter/conformance/client.mjs, the SDK pinned in the
lock file) against the real streamable-HTTP app with a pasted token: it lists the tools, calls
every read tool and the status tools (the SDK checks structuredContent against each tool's
outputSchema, and so does this test), subscribes to picnic://action/{id} and receives the
update of a real transition this test drives."""

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

from actions.services.signing import action_reject
from mcp_adapter.api import PicnicApi
from mcp_adapter.server import PicnicMCP
from mcp_adapter.tests.conftest import HttpServer
from mcp_adapter.tests.test_conformance import NODE, NPM_DIR, SUITE
from mcp_adapter.tools import TOOLS_BY_NAME

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.node]
SCOPES = (
    "read:actions read:accounts read:balances read:card read:transactions read:profile "
    "agent:dm_read operations:read"
)
READ_TOOLS = ["get_transactions", "get_smart_accounts", "get_balances", "get_card", "get_profile"]


def read_lines(process: subprocess.Popen, until: str, deadline: float) -> list[dict]:
    """JSON lines from the script up to and including the first of event `until`."""
    lines = []
    while time.monotonic() < deadline:
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
    from decimal import Decimal

    from operations import billing
    from operations.services import operation_submit

    billing.wallet_grant(owner=user, amount=Decimal("10"), note="test grant")
    return operation_submit(
        owner=user,
        application=application,
        tool="text-gen",
        category="sensitive",
        input_text="hello",
    )


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
        process = subprocess.Popen(
            [str(NODE), "client.mjs"],
            cwd=NPM_DIR,
            env={
                **os.environ,
                "MCP_URL": http.url,
                "MCP_TOKEN": token.token,
                "MCP_CALLS": json.dumps(calls),
                "MCP_SUBSCRIBE": action.resource_uri,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
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


def test_the_typescript_sdk_client_quotes_starts_and_follows_an_operation_through_review(
    live_server, settings, events_dir, mcp_resource, user, application, make_token, staff_user
):
    """Quote and start with the TS client (its SDK checks both answers against the tools'
    outputSchemas), then it follows tong://operation/{id} while staff approve in the console."""
    from decimal import Decimal

    from console.moves import MOVES, apply_move
    from operations import billing
    from operations.models import Operation
    from operations.services import quote_create

    if not SUITE.exists():
        pytest.fail("mcp_adapter/conformance/node_modules is missing: run `make deps`")
    settings.OPERATIONS_REVIEW_RULES = ["category:reviewed"]
    billing.wallet_grant(owner=user, amount=Decimal("10"), note="test grant")
    quote = quote_create(owner=user, tool="text-gen", submit_field="p", submit_value="hello")
    key = str(uuid.uuid4())
    token = make_token(user, application, scope="operations:read operations:write")
    port = urlsplit(mcp_resource).port
    settings.MCP_API_URL = live_server.url
    settings.MCP_ALLOWED_ORIGINS = [f"http://127.0.0.1:{port}"]
    server = PicnicMCP(http=True, output_schemas=True, api=PicnicApi(live_server.url))
    start = {"tool": "text-gen", "category": "reviewed", "quote_id": str(quote.pk)}
    calls = [
        ["tong_operation_quote", {"tool": "text-gen", "submit_field": "p", "submit_value": "x"}],
        ["tong_operation_start", {**start, "idempotency_key": key}],
        ["tong_operation_start", {**start, "idempotency_key": key}],
    ]
    # The start's id is the idempotency key's operation: made here first, so the script can
    # subscribe to it (the TS client's repeat of the key returns it).
    from operations.services import operation_submit

    operation = operation_submit(
        owner=user,
        application=application,
        tool="text-gen",
        category="reviewed",
        channel="mcp",
        quote_id=quote.pk,
        idempotency_key=key,
    )
    uri = f"tong://operation/{operation.pk}"
    with HttpServer(server, port) as http:
        process = subprocess.Popen(
            [str(NODE), "client.mjs"],
            cwd=NPM_DIR,
            env={
                **os.environ,
                "MCP_URL": http.url,
                "MCP_TOKEN": token.token,
                "MCP_CALLS": json.dumps(calls),
                "MCP_SUBSCRIBE": uri,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        lines = read_lines(process, "subscribed", deadline)
        outcome = apply_move(
            move=MOVES["operation:approve"],
            key=f"operation:{operation.pk}",
            entity=Operation.objects.get(pk=operation.pk),
            user=staff_user,
            note="fine",
            extra={},
        )
        assert outcome.ok, outcome.text
        lines += read_lines(process, "updated", deadline)
        assert process.wait(timeout=10) == 0, process.stderr.read()[-3000:]

    tools = {t["name"]: t for t in lines[1]["tools"]}
    quoted, first, repeat = [line for line in lines if line["event"] == "call"]
    for result in (quoted, first, repeat):
        assert "thrown" not in result and not result.get("isError"), result
        jsonschema.validate(result["structuredContent"], tools[result["tool"]]["outputSchema"])
    assert quoted["structuredContent"]["breakdown"]["total_credits"]
    assert (
        first["structuredContent"]["id"] == repeat["structuredContent"]["id"] == str(operation.pk)
    )
    assert first["structuredContent"]["channel"] == "mcp"
    updated = lines[-1]
    assert updated["uri"] == uri
    assert json.loads(updated["contents"][0]["text"])["state"] == "queued"
    assert Operation.objects.filter(owner=user).count() == 1
    assert billing.invariants(Operation.objects.get(pk=operation.pk)) == []
