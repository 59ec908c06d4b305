"""The streamable-HTTP app as a client meets it (mcp_adapter/http.py): scope discovery and
step-up, the 401 without credentials, the MCP-Protocol-Version header, CORS preflight,
serverInfo.version; raw HTTP where the status and headers are the point, the SDK's client
where the protocol is."""

from __future__ import annotations

import hashlib
import json
import re
import uuid

import anyio
import pytest
import requests

from actions.execution.models import Action
from mcp_adapter.tests.conftest import MemoryTokenStorage, run
from mcp_adapter.tests.test_transports import HEADERS, INIT

pytestmark = pytest.mark.django_db(transaction=True)
READ = "read:actions read:accounts read:balances read:card read:transactions read:profile"


def sse_events(text: str) -> list[dict[str, str]]:
    """The events of an SSE body: {"id", "retry", "data", "event"} as sent."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(":")
            if name:
                value = value[1:] if value.startswith(" ") else value
                event[name] = event.get(name, "") + value if name == "data" else value
        if event:
            events.append(event)
    return events


def messages(response: requests.Response) -> list[dict]:
    if response.headers["content-type"].startswith("application/json"):
        return [response.json()]
    return [json.loads(e["data"]) for e in sse_events(response.text) if e.get("data")]


class Session:
    """One 2025-11-25 session over raw HTTP."""

    def __init__(self, url: str, token: str, version: str = "2025-11-25"):
        self.url = url
        self.headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        init = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}
        response = requests.post(url, json=init, headers=self.headers, timeout=5)
        assert response.status_code == 200, response.text
        self.initialize = messages(response)[0]["result"]
        self.headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = self.initialize["protocolVersion"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert requests.post(url, json=note, headers=self.headers, timeout=5).status_code == 202

    def post(self, method: str, params: dict, **headers) -> requests.Response:
        body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
        return requests.post(self.url, json=body, headers={**self.headers, **headers}, timeout=10)


def challenge_params(header: str) -> dict[str, str]:
    assert header.startswith("Bearer ")
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def test_the_metadata_lists_the_scopes_and_the_401_names_the_first_ones(http_server):
    with http_server() as http:
        metadata_url = f"http://127.0.0.1:{http.port}/.well-known/oauth-protected-resource/mcp"
        metadata = requests.get(metadata_url, timeout=5).json()
        bare = requests.post(http.url, json=INIT, headers=HEADERS, timeout=5)
        bad = requests.post(
            http.url, json=INIT, headers={**HEADERS, "Authorization": "Bearer nope"}, timeout=5
        )
    assert set(metadata["scopes_supported"]) == {
        "read:actions",
        "write:actions",
        "read:accounts",
        "read:balances",
        "read:card",
        "read:transactions",
        "read:profile",
        "agent:dm_read",
        "agent:dm_write",
        "operations:read",
        "operations:write",
    }
    # No credentials at all: no error code (RFC 6750 §3.1), but where to go and what to ask.
    assert bare.status_code == 401
    params = challenge_params(bare.headers["WWW-Authenticate"])
    assert "error" not in params and params["resource_metadata"] == metadata_url
    first = set(params["scope"].split())
    assert "read:actions" in first and "write:actions" not in first  # write comes by step-up
    assert first < set(metadata["scopes_supported"])
    # A token we do not know: invalid_token.
    assert bad.status_code == 401
    params = challenge_params(bad.headers["WWW-Authenticate"])
    assert params["error"] == "invalid_token" and params["resource_metadata"] == metadata_url


def test_an_action_tool_without_write_actions_is_a_403_naming_the_scope_to_add(
    http_server, user, application, make_token
):
    reader = make_token(user, application, scope="read:actions read:card")
    writer = make_token(user, application, scope="read:actions read:card write:actions")
    with http_server() as http:
        refused = Session(http.url, reader.token).post(
            "tools/call", {"name": "card_freeze", "arguments": {}}
        )
        allowed = Session(http.url, writer.token).post(
            "tools/call", {"name": "card_freeze", "arguments": {}}
        )
        read = Session(http.url, reader.token).post(
            "tools/call", {"name": "get_card", "arguments": {}}
        )
    assert refused.status_code == 403
    params = challenge_params(refused.headers["WWW-Authenticate"])
    assert params["error"] == "insufficient_scope"
    # What the token had (so the client keeps it) plus what the tool needs.
    assert params["scope"] == "read:actions read:card write:actions"
    assert params["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")
    assert "card_freeze" in params["error_description"]
    # With the scope the call reaches the API, whose own answer comes back (no card here).
    assert allowed.status_code == 200
    result = messages(allowed)[-1]["result"]
    assert result["isError"] and result["content"][0]["text"] == "No Picnic card for this user"
    assert read.status_code == 200 and "result" in messages(read)[-1]
    assert not Action.objects.filter(user=user).exists()


def test_reading_an_action_needs_read_actions(http_server, user, application, make_token, action):
    token = make_token(user, application, scope="read:card")
    with http_server() as http:
        response = Session(http.url, token.token).post(
            "resources/read", {"uri": action.resource_uri}
        )
    assert response.status_code == 403
    assert challenge_params(response.headers["WWW-Authenticate"])["scope"] == (
        "read:card read:actions"
    )


def test_an_unknown_protocol_version_header_is_a_clear_400(
    http_server, user, application, make_token
):
    token = make_token(user, application, scope="read:actions")
    with http_server() as http:
        session = Session(http.url, token.token)
        post = session.post("tools/list", {}, **{"MCP-Protocol-Version": "1999-01-01"})
        get = requests.get(
            http.url,
            headers={**session.headers, "MCP-Protocol-Version": "garbage"},
            timeout=5,
        )
        ok = session.post("tools/list", {})
    assert post.status_code == 400
    error = post.json()["error"]
    assert error["code"] == -32022
    assert "MCP-Protocol-Version header" in error["message"] and "1999-01-01" in error["message"]
    assert "2025-11-25" in error["data"]["supported"] and error["data"]["requested"] == "1999-01-01"
    assert get.status_code == 400 and "garbage" in get.json()["error"]["message"]
    assert ok.status_code == 200


def test_a_2026_request_with_an_unknown_version_gets_that_revisions_error(
    http_server, user, application, make_token
):
    token = make_token(user, application, scope="read:actions")
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2099-01-01",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {
        **HEADERS,
        "Authorization": f"Bearer {token.token}",
        "MCP-Protocol-Version": "2099-01-01",
        "Mcp-Method": "tools/list",
    }
    with http_server() as http:
        response = requests.post(http.url, json=body, headers=headers, timeout=5)
    assert response.status_code == 400
    error = messages(response)[0]["error"]
    assert error["code"] == -32022 and error["data"]["requested"] == "2099-01-01"
    assert "2026-07-28" in error["data"]["supported"]


def test_initialize_with_an_unknown_version_answers_the_latest_handshake_version(
    http_server, user, application, make_token
):
    """2025-11-25 lifecycle: a version the server does not support is answered with one it
    does, the latest (2026-07-28 has no initialize)."""
    token = make_token(user, application, scope="read:actions")
    with http_server() as http:
        session = Session(http.url, token.token, version="1999-01-01")
    assert session.initialize["protocolVersion"] == "2025-11-25"
    assert session.initialize["serverInfo"] == {"name": "picnic", "version": "1.0.0"}
    assert "prompts" not in session.initialize["capabilities"]  # the product has none
    assert session.initialize["capabilities"]["resources"]["subscribe"] is True


def test_a_browser_preflight_is_answered_for_the_allowed_origins_only(http_server):
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version",
    }
    with http_server() as http:
        origin = f"http://127.0.0.1:{http.port}"
        ok = requests.options(http.url, headers={**preflight, "Origin": origin}, timeout=5)
        evil = requests.options(
            http.url, headers={**preflight, "Origin": "http://evil.example"}, timeout=5
        )
        # The real request's 401 is readable by the page (CORS headers on it too).
        unauthorized = requests.post(
            http.url, json=INIT, headers={**HEADERS, "Origin": origin}, timeout=5
        )
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == origin
    allowed = ok.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "mcp-protocol-version" in allowed
    assert "POST" in ok.headers["access-control-allow-methods"]
    assert evil.status_code == 400 and "access-control-allow-origin" not in evil.headers
    assert unauthorized.status_code == 401
    assert unauthorized.headers["access-control-allow-origin"] == origin
    assert "www-authenticate" in unauthorized.headers["access-control-expose-headers"].lower()


def test_the_python_sdks_oauth_client_steps_up_on_the_403(
    http_server, live_server, user, make_token, client
):
    """The SDK's OAuthClientProvider holds a read:actions token; a call to an action tool gets
    our 403 and the SDK re-authorizes (the real authorization-code flow on django-oauth-toolkit,
    PKCE, the user already signed in) asking for what it had plus what the 403 named, then
    retries with the new token."""
    from urllib.parse import parse_qs, urlsplit

    import httpx2
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import (
        AuthorizationCodeResult,
        OAuthClientInformationFull,
        OAuthClientMetadata,
        OAuthToken,
    )
    from oauth2_provider.models import AccessToken, Application

    redirect = "http://127.0.0.1:9999/callback"
    secret = uuid.uuid4().hex
    app = Application.objects.create(
        name="step-up",
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirect,
        client_secret=secret,
        skip_authorization=True,  # consent is the authorization server's business, not ours
    )
    reader = make_token(user, app, scope="read:actions")
    client.force_login(user)
    browser = requests.Session()
    browser.cookies.set("sessionid", client.cookies["sessionid"].value)
    asked: list[dict] = []
    answers: list[AuthorizationCodeResult] = []

    storage = MemoryTokenStorage(
        tokens=OAuthToken(access_token=reader.token, expires_in=3600, scope="read:actions"),
        client_info=OAuthClientInformationFull(
            client_id=app.client_id,
            client_secret=secret,
            redirect_uris=[redirect],
            token_endpoint_auth_method="client_secret_post",
        ),
    )

    async def redirect_handler(url: str) -> None:
        asked.append(parse_qs(urlsplit(url).query))
        response = await anyio.to_thread.run_sync(
            lambda: browser.get(url, allow_redirects=False, timeout=10)
        )
        assert response.status_code == 302, response.text[:500]
        back = parse_qs(urlsplit(response.headers["Location"]).query)
        answers.append(
            AuthorizationCodeResult(
                code=back["code"][0], state=back["state"][0], iss=back.get("iss", [None])[0]
            )
        )

    async def callback_handler() -> AuthorizationCodeResult:
        return answers[-1]

    async def body():
        provider = OAuthClientProvider(
            server_url=http.url,
            client_metadata=OAuthClientMetadata(redirect_uris=[redirect], scope="read:actions"),
            storage=storage,
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
        )
        async with httpx2.AsyncClient(auth=provider) as http_client:
            async with Client(streamable_http_client(http.url, http_client=http_client)) as mcp:
                return await mcp.call_tool("card_freeze", {})

    with http_server() as http:
        result = run(body)
    assert len(asked) == 1 and asked[0]["scope"] == ["read:actions write:actions"]
    assert asked[0]["resource"] == [http.url]
    assert set(storage.tokens.scope.split()) == {"read:actions", "write:actions"}
    new = AccessToken.objects.get(
        token_checksum=hashlib.sha256(storage.tokens.access_token.encode()).hexdigest()
    )
    assert new.user == user and set(new.scope.split()) == {"read:actions", "write:actions"}
    # The retry passed the gate (a result, not a 403) and the API took the token bound to the
    # MCP resource: the answer is the API's own, for a user with no card.
    assert result.is_error
    assert result.content[0].text == "No Picnic card for this user"


def test_hostile_bodies_get_protocol_errors_not_500s(http_server, user, application, make_token):
    token = make_token(user, application, scope="read:actions")
    with http_server() as http:
        session = Session(http.url, token.token)
        odd_names = [
            session.post("tools/call", {"name": ["card_freeze"], "arguments": {}}),
            session.post("tools/call", {"name": {"x": 1}}),
            session.post("resources/read", {"uri": ["picnic://action/x"]}),
        ]
        not_json = requests.post(http.url, data=b"\xff{", headers={**session.headers}, timeout=5)
        params_not_object = requests.post(
            http.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1]},
            headers=session.headers,
            timeout=5,
        )
    for response in [*odd_names, not_json, params_not_object]:
        assert 200 <= response.status_code < 500, response.text
        assert "error" in messages(response)[-1], response.text
