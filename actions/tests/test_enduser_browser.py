"""The end-user pages in Debian's Chromium (Playwright), in all three languages, each page
checked with axe-core (zero WCAG 2.2 A/AA violations).

Brazilian Portuguese runs the whole flow on the local chain: register a passkey with Chromium's
virtual authenticator, sign a transfer and a swap until executed, reject with confirmation, and
a transfer beyond the balance that fails on chain and is explained. Spanish and English check
the same pages without a chain (a made-up wallet; signing needs the chain): the language
switcher, the pages, keyboard-only reject with confirmation, a failure's explanation. That keeps
the browser part of CI to one chain run.

PICNIC_SCREENSHOT_DIR=docs/img refreshes the committed screenshots (docs/img/enduser-<lang>-<page>.png).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from web3 import Web3

from actions.accounts.models import Passkey
from actions.execution.models import ACTION_LIFECYCLE, Action
from actions.tests.browser import chromium, register_passkey, serve_passkeys, sign_in
from core.lifecycle import transition
from dev.providers.local_coingecko import LocalCoinGeckoServer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
RECIPIENT = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"
SCREENSHOT_DIR = os.environ.get("PICNIC_SCREENSHOT_DIR")
# WCAG 2.0, 2.1 and 2.2, levels A and AA.
WCAG_AA = {
    "runOnly": {
        "type": "tag",
        "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa"],
    },
    "resultTypes": ["violations"],
}


@pytest.fixture
def browser_env(live_server, settings, monkeypatch):
    serve_passkeys(live_server, settings, monkeypatch)
    with LocalCoinGeckoServer() as prices:
        settings.PRICE_API_URL = prices.url
        yield live_server


def audit(page, language: str, name: str, tmp_path: Path) -> None:
    """Zero axe violations of WCAG A/AA on the page as it is now, and its screenshot."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page, options=WCAG_AA)
    violations = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in results.response["violations"]
    ]
    assert violations == [], f"{language} {name}: {violations}"
    assert page.evaluate("document.documentElement.lang") == language.lower()
    assert page.title().endswith("· Picnic")
    page.screenshot(path=str(Path(SCREENSHOT_DIR or tmp_path) / f"enduser-{language}-{name}.png"))


# --- Brazilian Portuguese: the whole flow on the local chain --------------------------------


@pytest.mark.chain
def test_the_whole_flow_in_portuguese(
    browser_env,
    chain_settings,
    quotes,
    django_user_model,
    application,
    make_token,
    api_client,
    tmp_path,
):
    from chain import contracts
    from chain.dev import fund, mint
    from dev.demo.actions import ensure_demo_tokens

    ensure_demo_tokens()
    base = browser_env.url
    user = django_user_model.objects.create_user("ana", password="ana-password")
    with chromium("pt-BR") as page:
        page.goto(f"{base}/accounts/login/")
        assert page.inner_text("h1") == "Entrar"
        audit(page, "pt-BR", "login", tmp_path)
        account = register_passkey(page, base, user, "ana-password")
        assert "Conta Picnic" in page.inner_text("#accounts")
        audit(page, "pt-BR", "passkeys", tmp_path)

        w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
        fund(w3, account.address, Web3.to_wei(1, "ether"))
        mint(w3, "USDC", account.address, 5_000_000)
        token = make_token(user, application, scope="read:actions write:actions")
        usdc = f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}"
        eure = f"eip155:31337/erc20:{contracts.demo_token_address('EURe')}"

        def propose(tool: str, body: dict) -> dict:
            response = api_client.post(f"/api/v1/actions/{tool}", token, body)
            assert response.status_code == 201, response.content
            return response.json()

        # A transfer: the amount, its value in reais, the recipient, the network; signed.
        first = propose("transfer", {"asset_id": usdc, "amount": "1.5", "to": RECIPIENT})
        page.goto(first["sign_url"])
        headline = page.inner_text("#headline")
        assert headline == "Enviar 1,5 USDC para 0x15d3…6A65", headline
        assert "R$ 7,95" in page.inner_text("#send-amount").replace("\xa0", " ")
        assert page.inner_text("#recipient-address") == RECIPIENT
        # The chain table's name (core.chains), the same in every language.
        assert page.inner_text("#chain").strip() == "Gnosis (local)"
        audit(page, "pt-BR", "transfer", tmp_path)
        page.click("#approve")
        page.wait_for_selector('[data-status="executed"]', timeout=90_000)
        assert page.inner_text("#done").startswith("Concluído.")

        # A swap: you pay / you receive at least / quoted, and the slippage banner.
        swap = propose(
            "swap", {"from_asset_id": usdc, "to_asset_id": eure, "amount": "2", "slippage": 1.5}
        )
        page.goto(swap["sign_url"])
        assert page.inner_text("#you-pay").startswith("2 USDC")
        assert "EURe" in page.inner_text("#you-receive") and "EURe" in page.inner_text("#quoted")
        assert page.is_visible("#slippage-warning")
        audit(page, "pt-BR", "swap", tmp_path)
        page.click("#approve")
        page.wait_for_selector('[data-status="executed"]', timeout=90_000)

        # Reject asks first; "No" changes nothing, "Yes" rejects.
        second = propose("transfer", {"asset_id": usdc, "amount": "1", "to": RECIPIENT})
        page.goto(second["sign_url"])
        page.click("#reject")
        assert page.is_visible("#reject-confirm")
        audit(page, "pt-BR", "reject", tmp_path)
        page.click("#reject-no")
        assert not page.is_visible("#reject-confirm")
        assert Action.objects.get(pk=second["action_id"]).status == "proposed"
        page.click("#reject")
        page.click("#reject-yes")
        page.wait_for_selector('[data-status="rejected"]', timeout=30_000)
        assert page.inner_text("#rejected") == "Você recusou esta solicitação. Nada foi enviado."
        assert Action.objects.get(pk=second["action_id"]).status == "rejected"

        # More than the balance: the page warns, the operation fails on chain, and the page
        # says what happened and what to do, in Portuguese.
        third = propose("transfer", {"asset_id": usdc, "amount": "100", "to": RECIPIENT})
        page.goto(third["sign_url"])
        assert page.is_visible("#simulation-warning")
        page.click("#approve")
        page.wait_for_selector('[data-status="failed"]', timeout=90_000)
        failed = page.inner_text("#failed")
        assert failed.startswith(
            "Não foi possível concluir a transferência: sua conta não tinha USDC"
        )
        assert page.inner_text(".next-step").startswith("E agora:")
        audit(page, "pt-BR", "failed", tmp_path)


# --- Spanish and English: the pages, without a chain ----------------------------------------


@pytest.mark.parametrize("language", ["es", "en"])
def test_the_pages_in_spanish_and_english(
    browser_env, language, django_user_model, application, monkeypatch, tmp_path
):
    from django.conf import settings

    from actions.execution.models import ActionStatus
    from actions.tests.factories import (
        make_action,
        make_chain_unreachable,
        make_offline_wallet,
        make_swap_action,
    )
    from chain import contracts
    from core.lifecycle import Actor

    make_chain_unreachable(settings)
    base = browser_env.url
    user = django_user_model.objects.create_user("eva", password="eva-password")
    make_offline_wallet(user, monkeypatch)
    usdc = f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}"
    # The browser says English; Spanish is chosen with the switcher and remembered.
    with chromium("en-US") as page:
        page.goto(f"{base}/accounts/login/")
        if language == "es":
            page.select_option("#language", "es")
            page.click("#set-language")
            page.wait_for_selector("html[lang=es]")
        audit(page, language, "login", tmp_path)
        sign_in(page, base, "eva", "eva-password")
        assert (
            page.inner_text("h1") == {"es": "Tus llaves de acceso", "en": "Your passkeys"}[language]
        )
        # Another device: registered (the account exists, so no chain is needed), named,
        # then removed after a confirmation page.
        page.click("#register-passkey")
        page.wait_for_selector("li.passkey >> nth=1", timeout=30_000)
        second = page.locator("li.passkey").nth(1)
        name = {"es": "Portátil", "en": "Laptop"}[language]
        second.locator("input[name=name]").fill(name)
        second.locator("form.rename button").click()
        page.wait_for_selector(".message.success")
        assert page.locator("li.passkey").nth(1).locator("h2").inner_text() == name
        audit(page, language, "passkeys", tmp_path)
        page.locator("li.passkey").nth(1).locator("a.danger").click()
        assert name in page.inner_text("main")
        audit(page, language, "passkey-remove", tmp_path)
        page.click("#remove-yes")
        page.wait_for_selector(".message.success")
        assert page.locator("li.passkey").count() == 1
        assert Passkey.objects.filter(user=user).count() == 1
        # The passkey that owns the account offers no removal.
        assert page.locator("li.passkey a.danger").count() == 0

        transfer = make_action(
            user=user,
            application=application,
            params={"asset_id": usdc, "amount": "1234.5", "to": RECIPIENT, "symbol": "USDC"},
        )
        page.goto(f"{base}/sign/{transfer.pk}/")
        expected = {
            "es": ("Enviar 1.234,5 USDC a 0x15d3…6A65", "1.135,74 €"),
            "en": ("Send 1,234.5 USDC to 0x15d3…6A65", "$1,234.50"),
        }[language]
        assert page.inner_text("#headline") == expected[0]
        assert expected[1] in page.inner_text("#send-amount").replace("\xa0", " ")
        audit(page, language, "transfer", tmp_path)

        # Keyboard only: Enter on "Reject…" opens the confirmation and moves focus into it.
        page.focus("#reject")
        page.keyboard.press("Enter")
        assert page.is_visible("#reject-confirm")
        assert page.evaluate("document.activeElement.id") == "reject-confirm-heading"
        audit(page, language, "reject", tmp_path)
        page.focus("#reject-yes")
        page.keyboard.press("Enter")
        page.wait_for_selector('[data-status="rejected"]', timeout=30_000)
        assert Action.objects.get(pk=transfer.pk).status == "rejected"

        swap = make_swap_action(user=user, application=application, provider="demo-dex")
        page.goto(f"{base}/sign/{swap.pk}/")
        assert page.is_visible("#slippage-warning")
        audit(page, language, "swap", tmp_path)

        failed = make_action(
            user=user,
            application=application,
            params={"asset_id": usdc, "amount": "1", "to": RECIPIENT, "symbol": "USDC"},
        )
        page.goto(f"{base}/sign/{failed.pk}/")
        for step in (ActionStatus.SIGNED, ActionStatus.SUBMITTED):
            transition(lifecycle=ACTION_LIFECYCLE, pk=failed.pk, to=step, actor=Actor.system())
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=failed.pk,
            to=ActionStatus.FAILED,
            actor=Actor.system(),
            updates={"error": "bundler rejected (-32500): AA21 didn't pay prefund"},
        )
        # The open page learns it by itself (events, else its poll).
        page.wait_for_selector('[data-status="failed"]', timeout=15_000)
        lead = {
            "es": "No se pudo completar la transferencia: la red la rechazó",
            "en": "The transfer could not be completed: the network refused it",
        }[language]
        assert page.inner_text("#failed").startswith(lead)
        audit(page, language, "failed", tmp_path)
