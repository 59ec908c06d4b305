"""The OAuth tests' own fixtures: the real MCP HTTP server in front of the live API, the
browser's environment, and the authorization-code flow driven with Django's test client."""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import parse_qs, urlsplit

import pytest

from chain.stack import free_port
from mcp_adapter.api import PicnicApi
from mcp_adapter.server import PicnicMCP
from mcp_adapter.tests.conftest import HttpServer

CALLBACK = "http://127.0.0.1:9999/callback"


@pytest.fixture(autouse=True)
def fresh_agent_use_memo():
    """agent_use_record skips a write within a minute of this process's last one for the same
    (user id, application id); each test's database starts empty with the same ids, so the memo
    of an earlier test must not hide this test's first use."""
    from oauth import services

    services._last_written.clear()


@pytest.fixture
def mcp_resource(settings) -> str:
    port = free_port()
    settings.MCP_RESOURCE_URL = f"http://127.0.0.1:{port}/mcp"
    settings.MCP_ALLOWED_ORIGINS = [f"http://127.0.0.1:{port}"]
    return settings.MCP_RESOURCE_URL


@pytest.fixture
def mcp_http(live_server, settings, tmp_path, mcp_resource):
    """The MCP server over streamable HTTP on MCP_RESOURCE_URL, calling the live API."""
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    settings.MCP_API_URL = live_server.url
    port = urlsplit(mcp_resource).port
    with HttpServer(PicnicMCP(http=True, api=PicnicApi(live_server.url)), port) as http:
        yield http


@pytest.fixture
def browser_env(monkeypatch):
    # The ORM runs in worker threads (anyio.to_thread) next to the test's event loop.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def public_client(db):
    """A public client as dynamic registration makes it."""
    from oauth2_provider.models import Application

    return Application.objects.create(
        name="Registered agent",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=CALLBACK,
        registration_source=Application.RegistrationSource.DCR,
    )


class CodeFlow:
    """The authorization-code flow with PKCE S256 through Django's test client, as the
    signed-in user who approves."""

    def __init__(self, client, application, user):
        self.client = client
        self.application = application
        self.user = user
        self.verifier = secrets.token_urlsafe(48)
        digest = hashlib.sha256(self.verifier.encode()).digest()
        self.challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def params(self, **extra) -> dict:
        return {
            "client_id": self.application.client_id,
            "response_type": "code",
            "redirect_uri": CALLBACK,
            "scope": "read:actions",
            "state": "st4te",
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
            **extra,
        }

    def consent_page(self, **extra):
        self.client.force_login(self.user)
        return self.client.get("/o/authorize/", self.params(**extra))

    def approve(self, **extra) -> dict:
        """The redirect's query after approving: code, state, iss (or error)."""
        self.client.force_login(self.user)
        answer = self.client.post("/o/authorize/", {**self.params(**extra), "allow": "Authorize"})
        assert answer.status_code == 302, answer.content
        return {k: v[0] for k, v in parse_qs(urlsplit(answer["Location"]).query).items()}

    def token(self, code: str, **extra):
        self.client.logout()
        return self.client.post(
            "/o/token/",
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": CALLBACK,
                "client_id": self.application.client_id,
                "code_verifier": self.verifier,
                **extra,
            },
        )


@pytest.fixture
def code_flow(client, public_client, user) -> CodeFlow:
    return CodeFlow(client, public_client, user)
