"""An agent's trace (MCP `_meta.traceparent`, SEP-414, or the HTTP transport's `traceparent`
header) continues through the adapter's API call into the history rows of the work it made."""

from __future__ import annotations

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_adapter.tests.conftest import run
from messaging.models import Delivery

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


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


def test_the_http_transports_traceparent_header_reaches_the_history_rows(http_server, dm):
    token, args = dm.token.token, dm

    async def call():
        headers = {"Authorization": f"Bearer {token}", "traceparent": PARENT}
        async with httpx2.AsyncClient(headers=headers) as http_client:
            async with Client(streamable_http_client(http.url, http_client=http_client)) as client:
                return await client.call_tool("sosoapi_dm_actions_send", args())

    with http_server() as http:
        result = run(call)
    assert _traces(result) == {TRACE_ID}
