from __future__ import annotations

import anyio
import pytest

from actions.services.lifecycle import action_create
from chain.stack import free_port
from mcp_adapter.api import PicnicApi
from mcp_adapter.server import PicnicMCP
from messaging.tests.conftest import social_account, workspace  # noqa: F401 - shared fixtures


def run(fn, *args):
    """Run an async test body (the SDK's clients are async; the ORM stays outside them)."""
    return anyio.run(fn, *args)


def make_action(user, application):
    """A proposed card action: a real row with history, no chain needed."""
    return action_create(
        user=user,
        application=application,
        type="cardFreeze",
        summary="Freeze your Picnic card •••• 4242",
        chain_id=31337,
        smart_account="0x" + "ab" * 20,
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
