"""An MCP client connects by itself, with no pre-shared token: the official SDK's
OAuthClientProvider discovers the metadata (RFC 9728 on the MCP server, RFC 8414 here),
registers (RFC 7591, or a Client ID Metadata Document served over local HTTPS), a real
Chromium signs in and approves on the consent page, the SDK checks `iss` (RFC 9207) and gets
tokens bound to the MCP server (RFC 8707), lists tools and calls one over streamable HTTP
against the real MCP HTTP server, refreshes (the refresh token rotates), and after the user
disconnects the agent on "Connected agents" every token it held is refused."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult
from oauth2_provider.models import AccessToken, Application, RefreshToken

from chain.stack import free_port
from dev.testing import chromium_options
from mcp_adapter.tests.conftest import MemoryTokenStorage, make_action
from oauth.tests.tls import DocumentServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# PICNIC_SCREENSHOT_DIR=docs/img refreshes docs/img/oauth-consent.png and docs/img/oauth-agents.png.
SCREENSHOT_DIR = os.environ.get("PICNIC_SCREENSHOT_DIR")


async def _shoot(page, name: str) -> None:
    if SCREENSHOT_DIR:
        await page.screenshot(path=str(Path(SCREENSHOT_DIR) / name), full_page=True)


PASSWORD = "pw-alice"  # conftest's make_user


class Person:
    """The user at the browser: signs in when asked, then approves what the consent page
    shows; the agent's loopback callback is answered by the browser itself (a route), which
    hands the code to the SDK's callback handler."""

    def __init__(self, page, callback: str, username: str):
        self.page = page
        self.callback = callback
        self.username = username
        self.consents: list[dict] = []
        self.allow_reauthorization = True
        self._answer: anyio.Event | None = None
        self._query: dict = {}

    async def start(self):
        async def answer(route):
            self._query = {k: v[0] for k, v in parse_qs(urlsplit(route.request.url).query).items()}
            await route.fulfill(status=200, body="You can close this window.")
            if self._answer:
                self._answer.set()

        await self.page.route(f"{self.callback}**", answer)

    async def redirect_handler(self, url: str) -> None:
        if not self.allow_reauthorization:
            raise PermissionError("the agent asked the user to authorize it again")
        self._answer = anyio.Event()
        page = self.page
        await page.goto(url)
        if "/accounts/login/" in page.url:
            await page.fill("input[name=username]", self.username)
            await page.fill("input[name=password]", PASSWORD)
            await page.click("#sign-in")  # not the language switcher's button
            await page.wait_for_selector("#consent")
        self.consents.append(
            {
                "heading": await page.inner_text("#consent h1"),
                "unverified": await page.locator("#unverified").count() == 1,
                "scopes": await page.locator("#consent li[data-scope]").evaluate_all(
                    "items => items.map(i => i.dataset.scope)"
                ),
                "text": await page.inner_text("#consent"),
                "logo": await page.locator("#consent img.logo").get_attribute("src")
                if await page.locator("#consent img.logo").count()
                else None,
            }
        )
        if len(self.consents) == 1:
            await _shoot(page, "oauth-consent.png")
        await page.click("#approve")

    async def callback_handler(self) -> AuthorizationCodeResult:
        with anyio.fail_after(30):
            await self._answer.wait()
        return AuthorizationCodeResult(
            code=self._query["code"], state=self._query.get("state"), iss=self._query.get("iss")
        )


async def _browser(playwright):
    browser = await playwright.chromium.launch(
        **chromium_options(),
    )
    # The CIMD client's logo is on the test's own HTTPS server.
    context = await browser.new_context(ignore_https_errors=True)
    return browser, await context.new_page()


def _provider(http, person: Person, storage: MemoryTokenStorage, **kwargs) -> OAuthClientProvider:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientProvider(
        server_url=http.url,
        client_metadata=OAuthClientMetadata(
            client_name="Test agent",
            client_uri="https://agent.example/",
            redirect_uris=[person.callback],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=person.redirect_handler,
        callback_handler=person.callback_handler,
        **kwargs,
    )


async def _call_status(client, user) -> dict:
    """Propose an action as this agent (a row of its own), then read it through the tool."""
    application = await anyio.to_thread.run_sync(
        lambda: Application.objects.exclude(client_id="").latest("created")
    )
    action = await anyio.to_thread.run_sync(lambda: make_action(user, application))
    result = await client.call_tool("get_action_status", {"action_id": str(action.pk)})
    assert result.is_error is False, result.content
    return result.structured_content


def _raised(exc: BaseException | None, kind: type) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return any(_raised(e, kind) for e in exc.exceptions)
    return isinstance(exc, kind)


def test_an_sdk_client_registers_consents_calls_refreshes_and_is_cut_off(
    mcp_http, live_server, user, browser_env
):
    from playwright.async_api import async_playwright

    callback = f"http://127.0.0.1:{free_port()}/callback"
    storage = MemoryTokenStorage()
    seen: dict = {}

    async def body():
        async with async_playwright() as playwright:
            browser, page = await _browser(playwright)
            person = Person(page, callback, user.username)
            await person.start()
            provider = _provider(mcp_http, person, storage)
            async with httpx2.AsyncClient(auth=provider) as http_client:
                transport = streamable_http_client(mcp_http.url, http_client=http_client)
                async with Client(transport) as client:
                    seen["tools"] = {t.name for t in (await client.list_tools()).tools}
                    seen["first"] = await _call_status(client, user)
                    seen["first_tokens"] = storage.tokens
                    # The agent's clock passes the access token's expiry: it refreshes.
                    provider.context.token_expiry_time = time.time() - 1
                    seen["second"] = await _call_status(client, user)
                    seen["second_tokens"] = storage.tokens

            # The user disconnects the agent on "Connected agents".
            await page.goto(f"{live_server.url}/agents/")
            seen["agents_page"] = await page.inner_text("#agents")
            await _shoot(page, "oauth-agents.png")
            await page.click(".agent-card button.revoke")
            await page.wait_for_selector("#no-agents")
            # The agent comes back with what it holds: refused, it asks the user again.
            person.allow_reauthorization = False
            try:
                async with httpx2.AsyncClient(auth=provider) as http_client:
                    transport = streamable_http_client(mcp_http.url, http_client=http_client)
                    async with Client(transport) as client:
                        await client.list_tools()
            except BaseException as exc:  # noqa: BLE001 - the SDK wraps it in task groups
                seen["after"] = exc
            seen["consents"] = person.consents
            await browser.close()

    anyio.run(body)

    # Registered by DCR as a public client, bound to the loopback callback.
    application = Application.objects.get(client_id=storage.client_info.client_id)
    assert application.registration_source == Application.RegistrationSource.DCR
    assert application.client_type == Application.CLIENT_PUBLIC
    assert application.redirect_uris == callback
    assert application.name == "Test agent"
    # The consent page said who asks, unverified, and what it may read and propose.
    [consent] = seen["consents"]
    assert consent["heading"] == "Test agent wants to use your Picnic account"
    assert consent["unverified"] is True
    # The first authorization asks for what the read tools need; writes come by step-up.
    assert "read:actions" in consent["scopes"] and "write:actions" not in consent["scopes"]
    assert "approve it with your passkey" in consent["text"]
    assert "127.0.0.1" in consent["text"]  # where the answer goes
    # Tools listed and called with a token bound to the MCP server.
    assert "get_action_status" in seen["tools"]
    assert seen["first"]["status"] == "proposed"
    first, second = seen["first_tokens"], seen["second_tokens"]
    assert second.access_token != first.access_token
    assert second.refresh_token != first.refresh_token  # rotated
    assert seen["second"]["status"] == "proposed"
    assert "Test agent" in seen["agents_page"]
    assert "Not yet" not in seen["agents_page"]  # its MCP requests set "Last used"
    # Disconnected: nothing of it is left that works.
    assert not AccessToken.objects.filter(application=application, user=user).exists()
    assert not RefreshToken.objects.filter(application=application, revoked__isnull=True).exists()
    assert _raised(seen["after"], PermissionError)  # 401: it had to ask the user again
    for token in (first.access_token, second.access_token):
        headers = {"Authorization": f"Bearer {token}"}
        assert requests.post(mcp_http.url, json={}, headers=headers, timeout=5).status_code == 401
        api = requests.get(f"{live_server.url}/api/v1/profile", headers=headers, timeout=5)
        assert api.status_code == 401
    refreshed = requests.post(
        f"{live_server.url}/o/token/",
        data={
            "grant_type": "refresh_token",
            "refresh_token": second.refresh_token,
            "client_id": application.client_id,
        },
        timeout=5,
    )
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"


def test_an_sdk_client_with_a_client_id_metadata_document(
    mcp_http, live_server, user, browser_env, settings, monkeypatch, tmp_path
):
    from playwright.async_api import async_playwright

    callback = f"http://127.0.0.1:{free_port()}/callback"
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    storage = MemoryTokenStorage()
    seen: dict = {}
    with DocumentServer(tmp_path) as documents:
        monkeypatch.setenv("SSL_CERT_FILE", str(documents.ca))  # DOT's fetcher trusts our CA
        documents.document = {
            "client_id": documents.client_id,
            "client_name": "Document agent",
            "client_uri": f"{documents.origin}/",
            "logo_uri": f"{documents.origin}/logo.png",
            "redirect_uris": [callback],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }

        async def body():
            async with async_playwright() as playwright:
                browser, page = await _browser(playwright)
                person = Person(page, callback, user.username)
                await person.start()
                provider = _provider(
                    mcp_http, person, storage, client_metadata_url=documents.client_id
                )
                async with httpx2.AsyncClient(auth=provider) as http_client:
                    transport = streamable_http_client(mcp_http.url, http_client=http_client)
                    async with Client(transport) as client:
                        seen["status"] = await _call_status(client, user)
                seen["consents"] = person.consents
                await browser.close()

        anyio.run(body)

    application = Application.objects.get(client_id=documents.client_id)
    assert application.registration_source == Application.RegistrationSource.CIMD
    assert application.name == "Document agent"
    assert documents.fetches >= 1
    [consent] = seen["consents"]
    assert consent["heading"] == "Document agent wants to use your Picnic account"
    assert consent["unverified"] is False
    assert "published on localhost" in consent["text"]
    assert consent["logo"] is None  # not fetched yet: the monogram (test_logos.py fetches)
    assert seen["status"]["status"] == "proposed"
    token = AccessToken.objects.get(application=application)
    assert token.resource == [mcp_http.url]
