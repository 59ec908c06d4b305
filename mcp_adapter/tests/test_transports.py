"""The real transports with the SDK's clients: `manage.py mcp --transport stdio` as a
subprocess, and streamable HTTP (uvicorn on 127.0.0.1) with bearer tokens, RFC 9728 metadata,
Origin checks and scope errors."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
import requests
from django.conf import settings as django_settings
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_adapter.api import PicnicApi
from mcp_adapter.server import PicnicMCP, http_app
from mcp_adapter.tests.conftest import run

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(django_settings.BASE_DIR)


def test_stdio_runs_manage_py_mcp_as_a_subprocess(
    live_server, action, user, application, make_token, tmp_path
):
    token = make_token(user, application, scope="read:actions")
    env = {
        **os.environ,
        "PICNIC_MCP_TOKEN": token.token,
        "MCP_API_URL": live_server.url,
        "EVENTS_DIR": str(tmp_path / "events"),
        "SOSOAPI_OUTPUT_SCHEMAS": "1",
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--transport", "stdio", "--profile", "core"],
        env=env,
        cwd=str(ROOT),
    )

    async def body():
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            result = await client.call_tool("get_action_status", {"action_id": str(action.pk)})
            return tools, result

    tools, result = run(body)
    assert "sosoapi_dm_actions_status" not in {t.name for t in tools}  # core profile
    assert all(t.output_schema for t in tools if t.name == "get_action_status")
    assert result.is_error is False and result.structured_content["action_id"] == str(action.pk)


class HttpServer:
    def __init__(self, server: PicnicMCP, port: int):
        import uvicorn

        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.uvicorn = uvicorn.Server(
            uvicorn.Config(http_app(server), host="127.0.0.1", port=port, log_level="warning")
        )
        self.server = server

    def __enter__(self):
        async def main():
            async with self.server.event_pump():
                await self.uvicorn.serve()

        self.thread = threading.Thread(target=anyio.run, args=(main,), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.uvicorn.started:
            assert time.monotonic() < deadline, "the MCP HTTP server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.uvicorn.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def http_server(live_server, settings, events_dir, mcp_resource):
    def start(**overrides):
        port = urlsplit(mcp_resource).port
        settings.MCP_API_URL = live_server.url
        settings.MCP_ALLOWED_ORIGINS = [f"http://127.0.0.1:{port}"]
        for name, value in overrides.items():
            setattr(settings, name, value)
        return HttpServer(PicnicMCP(http=True, api=PicnicApi(live_server.url)), port)

    return start


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_http_refuses_missing_tokens_and_publishes_its_metadata(http_server, live_server):
    with http_server() as http:
        response = requests.post(http.url, json=INIT, headers=HEADERS, timeout=5)
        assert response.status_code == 401
        challenge = response.headers["WWW-Authenticate"]
        metadata_url = f"http://127.0.0.1:{http.port}/.well-known/oauth-protected-resource/mcp"
        assert (
            challenge.startswith("Bearer ") and f'resource_metadata="{metadata_url}"' in challenge
        )
        bad = requests.post(
            http.url, json=INIT, headers={**HEADERS, "Authorization": "Bearer nope"}, timeout=5
        )
        assert bad.status_code == 401
        metadata = requests.get(metadata_url, timeout=5).json()
        assert metadata["resource"] == http.url
        assert [u.rstrip("/") for u in metadata["authorization_servers"]] == [live_server.url]
    server_metadata = requests.get(
        f"{live_server.url}/.well-known/oauth-authorization-server", timeout=5
    ).json()
    assert server_metadata["code_challenge_methods_supported"] == ["S256"]


def test_http_checks_the_origin(http_server, user, application, make_token):
    token = make_token(user, application, scope="read:actions")
    with http_server() as http:
        auth = {**HEADERS, "Authorization": f"Bearer {token.token}"}
        evil = requests.post(
            http.url, json=INIT, headers={**auth, "Origin": "http://evil.example"}, timeout=5
        )
        assert evil.status_code == 403
        ok = requests.post(
            http.url,
            json=INIT,
            headers={**auth, "Origin": f"http://127.0.0.1:{http.port}"},
            timeout=5,
        )
        assert ok.status_code == 200


def test_http_answers_insufficient_scope_with_403(http_server, user, application, make_token):
    token = make_token(user, application, scope="agent:dm_read")
    with http_server(MCP_REQUIRED_SCOPES=["read:actions"]) as http:
        response = requests.post(
            http.url,
            json=INIT,
            headers={**HEADERS, "Authorization": f"Bearer {token.token}"},
            timeout=5,
        )
    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["WWW-Authenticate"]


def test_the_streamable_http_client_calls_tools_with_the_callers_token(
    http_server, action, user, other_user, application, make_token
):
    mine = make_token(user, application, scope="read:actions")
    theirs = make_token(other_user, application, scope="read:actions")

    async def call(token):
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers) as http_client:
            async with Client(streamable_http_client(http.url, http_client=http_client)) as client:
                return await client.call_tool("get_action_status", {"action_id": str(action.pk)})

    with http_server() as http:
        result = run(call, mine.token)
        assert result.is_error is False and result.structured_content["status"] == "proposed"
        refused = run(call, theirs.token)
        assert refused.is_error
        assert refused.content[0].text == "Action does not belong to the authenticated user"
