from __future__ import annotations

import contextlib
import socket
import threading
import time
import uuid
from urllib.parse import urlsplit

import anyio
import pytest
import requests

from actions.tests.factories import make_card_freeze
from chain.stack import free_port
from mcp_adapter.api import PicnicApi
from mcp_adapter.server import PicnicMCP, http_app
from messaging.models import Membership, Role
from messaging.tests.conftest import social_account, workspace  # noqa: F401 - shared fixtures


def run(fn, *args):
    """Run an async test body (the SDK's clients are async; the ORM stays outside them)."""
    return anyio.run(fn, *args)


class MemoryTokenStorage:
    """The MCP SDK's `TokenStorage` (OAuthClientProvider), in memory, optionally pre-filled."""

    def __init__(self, tokens=None, client_info=None):
        self.tokens = tokens
        self.client_info = client_info

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


DM_SCOPES = "agent:dm_read agent:dm_write read:profile"


@pytest.fixture
def dm(user, application, make_token, workspace, social_account):  # noqa: F811 - fixtures
    """What a DM send through MCP needs: `dm()` the raw arguments of one (a fresh idempotency
    key each), `dm.token` the user's access token with the DM scopes."""
    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)

    def arguments() -> dict:
        return {
            "workspace_id": str(workspace.pk),
            "social_account_id": str(social_account.pk),
            "recipient_id": "12345",
            "text": "hello",
            "idempotency_key": str(uuid.uuid4()),
        }

    arguments.token = make_token(user, application, scope=DM_SCOPES)
    return arguments


def make_action(user, application):
    """A proposed card action: a real row with history, no chain needed."""
    return make_card_freeze(
        user=user,
        application=application,
        summary="Freeze your Picnic card •••• 4242",
        params={"card_id": "c1"},
    )


@pytest.fixture(autouse=True)
def mcp_resource(settings) -> str:
    """The MCP server's resource identifier for this test (the HTTP server listens there)."""
    settings.MCP_RESOURCE_URL = f"http://127.0.0.1:{free_port()}/mcp"
    return settings.MCP_RESOURCE_URL


@pytest.fixture
def make_token(make_token, mcp_resource):
    """Tokens as an MCP client gets them: bound (RFC 8707) to the MCP server's resource,
    which the API accepts too (oauth.policy.api_accepts_audience)."""

    def make(user, application, scope: str = "read:actions", **kwargs):
        kwargs.setdefault("resource", [mcp_resource])
        return make_token(user, application, scope=scope, **kwargs)

    return make


@pytest.fixture
def action(user, application):
    return make_action(user, application)


@pytest.fixture
def events_dir(settings, tmp_path):
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    return settings.EVENTS_DIR


@pytest.fixture
def make_server(live_server, events_dir):
    """An adapter that calls the live test server's API with `token`."""

    def make(token: str | None, **kwargs) -> PicnicMCP:
        return PicnicMCP(api=PicnicApi(live_server.url), token=token, **kwargs)

    return make


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


def open_get_stream(url: str, rpc, protocol_version: str, *, timeout: float = 30):
    """The session's GET stream (server-sent events), opened and streaming: `rpc` is an
    HttpRpc of the session (its auth headers and session id)."""
    stream = requests.get(
        url,
        headers={
            **rpc.headers,
            "Accept": "text/event-stream",
            "Mcp-Session-Id": rpc.session_id,
            "MCP-Protocol-Version": protocol_version,
        },
        stream=True,
        timeout=timeout,
    )
    assert stream.status_code == 200
    return stream


def close_stream(response: requests.Response) -> None:
    """End a streamed response that another thread is reading: its socket is shut down first,
    so the blocked read returns at once (`close()` alone waits for that read to end, up to the
    request's read timeout: 30 s a test)."""
    connection = response.raw.connection
    if connection is not None and connection.sock is not None:
        with contextlib.suppress(OSError):  # already closed by the server
            connection.sock.shutdown(socket.SHUT_RDWR)
    response.close()


@pytest.fixture
def http_server(live_server, settings, events_dir, mcp_resource):
    def start(*, output_schemas: bool | None = None, **overrides):
        """`output_schemas`: publish the tools' output schemas (what SOSOAPI_OUTPUT_SCHEMAS=1
        does; an environment variable, so not one of the settings `overrides`)."""
        # It listens at the resource the test's tokens are bound to (RFC 8707).
        port = urlsplit(mcp_resource).port
        settings.MCP_API_URL = live_server.url
        settings.MCP_ALLOWED_ORIGINS = [f"http://127.0.0.1:{port}"]
        for name, value in overrides.items():
            setattr(settings, name, value)
        server = PicnicMCP(http=True, api=PicnicApi(live_server.url), output_schemas=output_schemas)
        return HttpServer(server, port)

    return start
