"""What the Chromium (Playwright) tests of the end-user pages share: a page with a CDP virtual
authenticator, the live server as the passkeys' origin, and the user's steps (sign in, register
a passkey, a signed-in user with a funded passkey account, sign on the signing page until
executed). The tests of actions and of mcp_adapter
import them from here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pytest
from django.contrib.auth import get_user_model
from web3 import Web3

from actions.accounts.models import SmartAccount
from chain.dev import fund, mint
from core.chains import card_chain
from dev.demo.actions import ensure_demo_tokens
from dev.testing import add_virtual_authenticator, chromium_options


def serve_passkeys(live_server, settings, monkeypatch) -> None:
    """The live server as the passkeys' relying party, Celery tasks run where they are sent."""
    # Playwright's sync API runs an event loop in this thread; the ORM calls here are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from picnic.celery import app as celery_app

    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.WEBAUTHN_ORIGIN = live_server.url
    settings.PUBLIC_BASE_URL = live_server.url


@contextmanager
def chromium(locale: str | None = None, *, width: int = 820) -> Iterator:
    """A page in Debian's Chromium whose language is `locale` (Accept-Language and navigator;
    the browser's own without one), with a CDP virtual authenticator that verifies the user."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options())
        context = browser.new_context(locale=locale, viewport={"width": width, "height": 900})
        page = context.new_page()
        add_virtual_authenticator(context.new_cdp_session(page))
        try:
            yield page
        finally:
            browser.close()


@pytest.fixture
def browser_page(live_server, chain_settings, settings, monkeypatch):
    """A Chromium page for the signing pages of the live server, on the local chain."""
    serve_passkeys(live_server, settings, monkeypatch)
    ensure_demo_tokens()
    with chromium(width=1000) as page:
        yield page


def sign_in(page, base_url: str, username: str, password: str) -> None:
    """Sign in with a password; lands on the passkeys page."""
    page.goto(f"{base_url}/accounts/login/?next=/passkeys/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("#sign-in")
    page.wait_for_url("**/passkeys/")


def register_passkey(page, base_url: str, user, password: str) -> SmartAccount:
    """Sign in and register a passkey with the virtual authenticator; the account it owns on
    the card's chain."""
    sign_in(page, base_url, user.username, password)
    page.click("#register-passkey")
    page.wait_for_selector("li.passkey", timeout=30_000)  # the page reloads with the list
    return SmartAccount.objects.get(user=user, passkey__isnull=False, chain_id=31337)


class PasskeyUser(NamedTuple):
    user: Any
    account: SmartAccount
    w3: Web3  # the card's chain


def passkey_user(page, base_url: str, username: str, *, usdc: int) -> PasskeyUser:
    """A new user `username` (password "<username>-password") signed in on `page` with a
    passkey registered; its account on the card's chain holds 1 ETH for gas and `usdc` units
    (6 decimals) of the demo USDC."""
    password = f"{username}-password"
    user = get_user_model().objects.create_user(username, password=password)
    account = register_passkey(page, base_url, user, password)
    w3 = Web3(Web3.HTTPProvider(card_chain().rpc_url))
    fund(w3, account.address, Web3.to_wei(1, "ether"))
    mint(w3, "USDC", account.address, usdc)
    return PasskeyUser(user, account, w3)


def sign_on_page(page, sign_url: str, *selectors: str, timeout: int = 90_000) -> dict[str, str]:
    """Open the signing page, approve with the passkey, wait until executed; the text of
    `selectors` as the user read them before approving."""
    page.goto(sign_url)
    shown = {selector: page.inner_text(selector) for selector in selectors}
    page.click("#approve")
    page.wait_for_selector('[data-status="executed"]', timeout=timeout)
    return shown
