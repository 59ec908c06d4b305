"""End to end in Debian's Chromium (Playwright) with a CDP virtual authenticator:
register a passkey, transfer 1.5 demo USDC, sign on the page, see it executed on chain; the same
to merchant.eth (ENS); reject another action; let a third expire."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action
from actions.execution.models import ActionStatus as S
from actions.tests.browser import browser_page, passkey_user, sign_in, sign_on_page  # noqa: F401
from actions.tests.factories import make_action, make_chain_unreachable
from chain import contracts, ens
from chain.dev import token_balance
from core.lifecycle import Actor, transition
from dev.providers.local_lifi import LocalLifiServer

pytestmark = [pytest.mark.chain, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
RECIPIENT = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"
# PICNIC_SCREENSHOT_DIR=docs/img refreshes the committed screenshot (docs/img/signing-page.png); the
# end-user pages in three languages are in test_enduser_browser.py.
SCREENSHOT_DIR = os.environ.get("PICNIC_SCREENSHOT_DIR")


def test_register_transfer_sign_execute_reject_and_expire(
    browser_page,  # noqa: F811 - the imported fixture
    live_server,
    application,
    make_token,
    api_client,
    tmp_path,
    settings,
):
    page = browser_page
    user, account, w3 = passkey_user(page, live_server.url, "alice", usdc=5_000_000)
    before = token_balance(w3, "USDC", RECIPIENT)
    token = make_token(user, application, scope="read:actions write:actions")

    def propose(amount: str, to: str = RECIPIENT) -> dict:
        response = api_client.post(
            "/api/v1/actions/transfer",
            token,
            {
                "asset_id": f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}",
                "amount": amount,
                "to": to,
            },
        )
        assert response.status_code == 201, response.content
        return response.json()

    first = propose("1.5")
    shown = sign_on_page(page, first["sign_url"], "#headline", "#recipient-address")
    assert shown["#headline"] == f"Send 1.5 USDC to {RECIPIENT[:6]}…{RECIPIENT[-4:]}"
    assert shown["#recipient-address"] == RECIPIENT
    assert token_balance(w3, "USDC", RECIPIENT) - before == 1_500_000
    executed = Action.objects.get(pk=first["action_id"])
    assert executed.tx_hash and w3.eth.get_transaction_receipt(executed.tx_hash)["status"] == 1
    assert [h.status for h in executed.history.order_by("timestamp", "id")] == [
        "proposed",
        "signed",
        "submitted",
        "broadcast",
        "executed",
    ]

    # To an ENS name: the page shows the name with the full address beside it; the resolved
    # address is what the signed user operation pays.
    merchant = w3.eth.account.from_key(ens.MERCHANT_KEY).address
    ens.register(w3, "merchant.eth", merchant)
    merchant_before = token_balance(w3, "USDC", merchant)
    named = propose("1", to="merchant.eth")
    shown = sign_on_page(page, named["sign_url"], "#headline", "#recipient-address")
    assert shown["#headline"] == "Send 1 USDC to merchant.eth"
    assert shown["#recipient-address"] == merchant
    assert token_balance(w3, "USDC", merchant) - merchant_before == 1_000_000
    assert Action.objects.get(pk=named["action_id"]).params["ens"] == "merchant.eth"

    second = propose("1")
    page.goto(second["sign_url"])
    page.click("#reject")  # asks first
    page.click("#reject-yes")
    page.wait_for_selector('[data-status="rejected"]', timeout=30_000)
    assert Action.objects.get(pk=second["action_id"]).status == "rejected"

    # A swap with 1.5 % slippage: the signing page shows the warning banner.
    with LocalLifiServer() as quotes:
        settings.SWAP_QUOTE_URL = quotes.url
        response = api_client.post(
            "/api/v1/actions/swap",
            token,
            {
                "from_asset_id": f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}",
                "to_asset_id": f"eip155:31337/erc20:{contracts.demo_token_address('EURe')}",
                "amount": "2",
                "slippage": 1.5,
            },
        )
    assert response.status_code == 201, response.content
    page.goto(response.json()["sign_url"])
    assert page.is_visible("#slippage-warning")
    page.screenshot(path=str(Path(SCREENSHOT_DIR or tmp_path) / "signing-page.png"), full_page=True)

    third = propose("1")
    Action.objects.filter(pk=third["action_id"]).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    page.goto(third["sign_url"])
    assert page.is_visible("#expired") and not page.is_visible("#approve")
    assert Action.objects.get(pk=third["action_id"]).status == "expired"


def _seconds(shown: str) -> int:
    """ "3:07" → 187, "1:03:05" → 3785 (the page's time-left clock)."""
    total = 0
    for part in shown.split(":"):
        total = total * 60 + int(part)
    return total


def test_the_page_counts_down_expires_by_itself_and_stops_polling_at_failed(
    browser_page,  # noqa: F811 - the imported fixture
    live_server,
    django_user_model,
    application,
    settings,
):
    # Polls refresh in-flight actions against the bundler: make it unreachable, so what the
    # page shows is what this test stores.
    make_chain_unreachable(settings)
    page = browser_page
    user = django_user_model.objects.create_user("carol", password="carol-password")
    sign_in(page, live_server.url, "carol", "carol-password")

    # The countdown moves between polls (the server answers 204 while nothing changes).
    action = make_action(user=user, application=application, ttl_seconds=600)
    page.goto(f"{live_server.url}/sign/{action.pk}/")
    first = _seconds(page.inner_text("#time-left .time-left-value"))
    page.wait_for_timeout(3_500)
    second = _seconds(page.inner_text("#time-left .time-left-value"))
    assert 590 <= first <= 600 and 2 <= first - second <= 5, (first, second)

    # At zero the page turns to expired on its own.
    short = make_action(user=user, application=application, ttl_seconds=3)
    page.goto(f"{live_server.url}/sign/{short.pk}/")
    page.wait_for_selector("#expired", timeout=15_000)
    assert not page.is_visible("#approve")
    assert Action.objects.get(pk=short.pk).status == "expired"

    # Signed elsewhere; delivery errs (retrying, polling on); then it fails for good: the
    # page says why in plain words and stops polling.
    doomed = make_action(user=user, application=application, ttl_seconds=600)
    page.goto(f"{live_server.url}/sign/{doomed.pk}/")
    for step in (S.SIGNED, S.SUBMITTED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=doomed.pk, to=step, actor=Actor.system())
    Action.objects.filter(pk=doomed.pk).update(error="bundler unreachable: timed out")
    page.wait_for_selector("#retrying", timeout=15_000)
    assert "trying again automatically" in page.inner_text("#retrying")
    refusal = (
        "bundler rejected (-32500): UserOperation reverted with reason: "
        "AA26 over verificationGasLimit"
    )
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=doomed.pk,
        to=S.FAILED,
        actor=Actor.system(),
        updates={"error": refusal},
    )
    page.wait_for_selector('[data-status="failed"]', timeout=15_000)
    shown = page.inner_text("#timeline")
    assert "The transfer could not be completed: the network refused it" in shown
    assert "executing" not in shown.lower()
    # The raw reason is there for support, folded under "Technical details".
    assert refusal in page.text_content("#failed-detail")
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url))
    page.wait_for_timeout(5_000)
    assert not [url for url in polls if f"/sign/{doomed.pk}/" in url], polls
