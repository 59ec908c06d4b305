"""The consent and Connected agents pages in Debian's Chromium, in Brazilian Portuguese,
checked with axe-core (zero WCAG 2.2 A/AA violations), as the other end-user pages are
(actions/tests/test_enduser_browser.py). One visit per page: the whole OAuth flow in a browser
is oauth/tests/test_end_to_end.py's.

PICNIC_SCREENSHOT_DIR=docs/img also writes docs/img/enduser-pt-BR-consent.png and
docs/img/enduser-pt-BR-agents.png."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.test import Client

from actions.tests.test_enduser_browser import WCAG_AA
from dev.testing import chromium_options
from oauth.models import ClientProfile

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENSHOT_DIR = os.environ.get("PICNIC_SCREENSHOT_DIR")


def audit(page, name: str, tmp_path: Path) -> None:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page, options=WCAG_AA)
    violations = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in results.response["violations"]
    ]
    assert violations == [], f"pt-BR {name}: {violations}"
    assert page.evaluate("document.documentElement.lang") == "pt-br"
    assert page.title().endswith("· Picnic")
    page.screenshot(path=str(Path(SCREENSHOT_DIR or tmp_path) / f"enduser-pt-BR-{name}.png"))


def test_consent_and_connected_agents_in_portuguese_pass_axe(
    live_server, monkeypatch, tmp_path, code_flow, public_client, user, make_token
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop in this thread
    from playwright.sync_api import sync_playwright

    ClientProfile.objects.create(
        client_id=public_client.client_id, client_uri="https://agent.example/"
    )
    make_token(user, public_client, scope="read:actions read:balances write:actions")
    signed_in = Client()
    signed_in.force_login(user)
    consent = f"{live_server.url}/o/authorize/?" + urlencode(
        code_flow.params(scope="read:balances read:actions write:actions")
    )

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            **chromium_options(),
        )
        context = browser.new_context(locale="pt-BR", viewport={"width": 820, "height": 900})
        context.add_cookies(
            [
                {
                    "name": "sessionid",
                    "value": signed_in.cookies["sessionid"].value,
                    "url": live_server.url,
                }
            ]
        )
        page = context.new_page()
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        try:
            page.goto(consent)
            assert page.inner_text("#consent h1") == "Registered agent quer usar sua conta Picnic"
            assert page.locator("#unverified").is_visible()
            assert "Os saldos de tokens" in page.inner_text("#consent .scopes.reads")
            audit(page, "consent", tmp_path)

            page.goto(f"{live_server.url}/agents/")
            card = page.locator(".agent-card")
            assert card.locator("h2").inner_text() == "Registered agent"
            assert "Propor ações de carteira" in card.inner_text()
            # Each Disconnect button names its agent to a screen reader.
            assert card.get_by_role("button", name="Desconectar Registered agent").count() == 1
            audit(page, "agents", tmp_path)
        finally:
            browser.close()
    # The base's scripts and styles load under each page's CSP: nothing was refused.
    assert problems == []
