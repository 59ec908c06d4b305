"""docs/examples/mcp_oauth.py against the real MCP HTTP server and the live API: the example
registers by DCR, its redirect handler (here: the user in Chromium, signing in and approving)
goes through the consent page, its own loopback callback receives the code, and the tool call
answers; a second run reuses the tokens it kept in its file and asks nobody."""

from __future__ import annotations

import importlib.util
import json
import stat
from pathlib import Path

import anyio
import pytest
from oauth2_provider.models import AccessToken, Application

from chain.stack import free_port
from dev.testing import chromium_options

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mcp_oauth.py"


def load_example():
    spec = importlib.util.spec_from_file_location("mcp_oauth_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_oauth_example_connects_through_the_consent_page_then_reuses_its_tokens(
    mcp_http, user, browser_env, tmp_path
):
    from playwright.async_api import async_playwright

    example = load_example()
    store = tmp_path / "picnic-mcp-oauth.json"
    port = free_port()
    consents: list[str] = []

    async def body():
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(**chromium_options())
            page = await (await browser.new_context()).new_page()

            async def person_approves(url: str) -> None:
                """What the user does in the browser the example opened."""
                await page.goto(url)
                if "/accounts/login/" in page.url:
                    await page.fill("input[name=username]", user.username)
                    await page.fill("input[name=password]", "pw-" + user.username)
                    await page.click("#sign-in")
                    await page.wait_for_selector("#consent")
                consents.append(await page.inner_text("#consent h1"))
                await page.click("#approve")
                # The browser lands on the example's own loopback callback.
                await page.wait_for_url(f"http://127.0.0.1:{port}/callback?**")
                consents.append(await page.inner_text("body"))

            async def nobody(url: str) -> None:
                raise AssertionError(f"the example asked for consent again: {url}")

            first = await example.call_tool(
                mcp_http.url,
                "get_smart_accounts",
                {},
                storage=example.FileTokenStorage(store),
                redirect_handler=person_approves,
                callback_port=port,
            )
            second = await example.call_tool(
                mcp_http.url,
                "get_smart_accounts",
                {},
                storage=example.FileTokenStorage(store),
                redirect_handler=nobody,
                callback_port=port,
            )
            await browser.close()
            return first, second

    first, second = anyio.run(body)

    assert first.is_error is False, first.content
    assert first.structured_content == {"smartAccounts": []}
    assert second.is_error is False and second.structured_content == {"smartAccounts": []}
    assert "Picnic example agent" in consents[0]
    assert consents[1] == "Picnic: you can close this window and return to the agent."
    # Registered by DCR as a public client on the example's loopback callback; one token,
    # bound to the MCP server, for the user who approved.
    kept = json.loads(store.read_text())
    application = Application.objects.get(client_id=kept["client_info"]["client_id"])
    assert application.registration_source == Application.RegistrationSource.DCR
    assert application.client_type == Application.CLIENT_PUBLIC
    assert application.redirect_uris == f"http://127.0.0.1:{port}/callback"
    assert application.name == "Picnic example agent"
    # (Beside the registration access token of RFC 7592, which has its own scope.)
    token = AccessToken.objects.exclude(scope="oauth2_provider:registration").get(
        application=application
    )
    assert token.user == user and token.resource == [mcp_http.url]
    assert kept["tokens"]["access_token"]
    assert stat.S_IMODE(store.stat().st_mode) == 0o600
