"""An agent's trace (MCP `_meta.traceparent`, SEP-414, or the HTTP transport's `traceparent`
header) continues through the adapter's API call into the history rows of the work it made;
with OpenTelemetry on, it is one trace of exported spans from the MCP process to the chain."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

import httpx2
import pytest
from django.conf import settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared import jsonrpc_dispatcher
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from actions.accounts.models import Passkey, SmartAccount
from chain.stack import free_port
from core import tracing
from dev import processes
from dev.demo.actions import ensure_demo_tokens
from dev.testing import OtlpReceiver, database_url, wait_until
from mcp_adapter.tests.conftest import run
from messaging.models import Delivery

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
SERVER, CLIENT = Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CLIENT


def _traces(result) -> set[str]:
    assert result.is_error is False, result.content
    delivery = Delivery.objects.get(pk=result.structured_content["action"]["id"])
    return {delivery.trace_id, *delivery.history.values_list("trace_id", flat=True)}


async def _send(server, arguments, meta):
    async with Client(server) as client:
        return await client.call_tool("sosoapi_dm_actions_send", arguments, meta=meta)


def test_meta_traceparent_reaches_the_history_rows(make_server, dm):
    token, args = dm.token.token, dm
    result = run(_send, make_server(token), args(), {"traceparent": PARENT})
    assert _traces(result) == {TRACE_ID}


@pytest.mark.parametrize(
    "value",
    [
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",
        PARENT + "-more",
        PARENT.replace("4", "\x00"),
        PARENT.replace("4", "é"),
        "x" * 100_000,
        12,
        None,
        ["00", TRACE_ID],
        {"traceparent": PARENT},
    ],
)
def test_a_hostile_meta_traceparent_is_ignored(make_server, dm, value):
    token, args = dm.token.token, dm
    result = run(_send, make_server(token), args(), {"traceparent": value})
    [trace] = _traces(result)  # one new trace, started by the API
    assert len(trace) == 32 and trace != TRACE_ID


def test_the_http_transports_traceparent_header_reaches_the_history_rows(
    http_server, dm, monkeypatch
):
    token, args = dm.token.token, dm
    # An agent that sends the header only: the SDK's client in this process would put a trace
    # of its own in each request's `_meta` (SEP-414), which comes first.
    monkeypatch.setattr(jsonrpc_dispatcher, "inject_trace_context", lambda meta: None)

    async def call():
        headers = {"Authorization": f"Bearer {token}", "traceparent": PARENT}
        async with httpx2.AsyncClient(headers=headers) as http_client:
            async with Client(streamable_http_client(http.url, http_client=http_client)) as client:
                return await client.call_tool("sosoapi_dm_actions_send", args())

    with http_server() as http:
        result = run(call)
    assert _traces(result) == {TRACE_ID}


@pytest.mark.chain
def test_with_opentelemetry_a_tool_call_reading_the_chain_is_one_trace(
    chain_world, user, application, make_token, mcp_resource, tmp_path
):
    """The MCP process (its HTTP server span, the SDK's span of the tool call) and the web
    process it calls (its server span, the chain's JSON-RPC client span) export to one local
    OTLP/HTTP collector: one trace, the caller's, from the agent's request to the node."""
    ensure_demo_tokens()
    passkey = Passkey.objects.create(
        user=user, credential_id="cred-1", public_key=b"\x00", public_key_x="0x", public_key_y="0x"
    )
    SmartAccount.objects.create(
        user=user,
        kind="picnic",
        chain_id=chain_world.card.chain_id,
        address="0x" + "ab" * 20,
        owner="passkey:cred-1",
        passkey=passkey,
        entry_point_version="0.7",
    )
    token = make_token(user, application, scope="read:balances")
    web_port, mcp_port = free_port(), urlsplit(mcp_resource).port
    web_url = f"http://127.0.0.1:{web_port}"
    with OtlpReceiver() as collector:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s
            "PICNIC_VAR_DIR": str(tmp_path / "var"),
            "CHAIN_RPC_URL": chain_world.card.rpc_url,
            "BUNDLER_RPC_URL": chain_world.card.bundler_url,
            "L2_CHAIN_RPC_URL": chain_world.l2.rpc_url,
            "L2_BUNDLER_RPC_URL": chain_world.l2.bundler_url,
            "MCP_RESOURCE_URL": mcp_resource,
            "MCP_API_URL": web_url,
        }
        web = processes.gunicorn(
            {**env, "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "OTEL_SERVICE_NAME": "picnic-web"},
            tmp_path / "web.log",
            bind=f"127.0.0.1:{web_port}",
        ).start()
        mcp = processes.Process(
            "mcp",
            [sys.executable, "manage.py", "mcp", "--transport", "http", "--port", str(mcp_port)],
            {**env, "OTEL_SERVICE_NAME": "picnic-mcp"},
            tmp_path / "mcp.log",
        ).start()
        try:
            wait_until(lambda: processes.answers(f"{web_url}/healthz"), timeout=60)
            metadata = f"http://127.0.0.1:{mcp_port}/.well-known/oauth-protected-resource/mcp"
            wait_until(lambda: processes.answers(metadata), timeout=60)

            async def call():
                headers = {"Authorization": f"Bearer {token.token}", "traceparent": PARENT}
                # The agent's own span is current: the SDK client sends its trace in `_meta`
                # too (SEP-414), which the server prefers to the header.
                with tracing.span(PARENT, name="agent"):
                    async with httpx2.AsyncClient(headers=headers, timeout=30) as http_client:
                        transport = streamable_http_client(mcp_resource, http_client=http_client)
                        async with Client(transport) as client:
                            return await client.call_tool("get_balances", {})

            result = run(call)
            assert result.is_error is False, result.content

            def exported() -> bool:
                spans = collector.in_trace(TRACE_ID)
                return {"tools/call get_balances", "picnic-web SERVER", "picnic CLIENT"} <= {
                    *(s["name"] for s in spans),
                    *(f"{s['service']} SERVER" for s in spans if s["kind"] == SERVER),
                    *(f"{s['scope']} CLIENT" for s in spans if s["kind"] == CLIENT),
                }

            wait_until(exported, timeout=30)
        finally:
            mcp.stop()
            web.stop()
    spans = collector.in_trace(TRACE_ID)
    by_id = {s["span_id"]: s for s in spans}
    [tool] = [s for s in spans if s["name"] == "tools/call get_balances"]
    # The tool's span continues the agent's span from `_meta` (the SDK client's span of the
    # call, in the agent's process, which exports nowhere); the MCP process's HTTP server
    # spans are of the same trace (from the `traceparent` header).
    assert tool["parent_span_id"] and tool["parent_span_id"] not in by_id
    assert [s for s in spans if s["service"] == "picnic-mcp" and s["kind"] == SERVER]
    # The web's server span continues from the tool's span (the API call's traceparent).
    [web_server] = [s for s in spans if s["service"] == "picnic-web" and s["kind"] == SERVER]
    assert web_server["parent_span_id"] == tool["span_id"]
    # The chain's JSON-RPC calls: client spans under the web's request.
    rpc = [s for s in spans if s["scope"] == "picnic" and s["kind"] == CLIENT]
    assert rpc and all(s["service"] == "picnic-web" for s in rpc)
    assert {s["name"] for s in rpc} <= {"jsonrpc batch", "eth_call", "eth_getBalance"}

    def ancestors(span):
        while span["parent_span_id"] in by_id:
            span = by_id[span["parent_span_id"]]
            yield span["span_id"]

    assert all(web_server["span_id"] in set(ancestors(s)) for s in rpc)
