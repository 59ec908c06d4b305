"""A refunded cross-chain swap's signing page in Chromium, in Brazilian Portuguese on a phone
(390 px): not shown as a success, nothing wider than the screen, zero WCAG A/AA violations.

PICNIC_SCREENSHOT_DIR=docs/img refreshes docs/img/enduser-pt-BR-swap-refunded.png."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actions.bridges.models import BridgeLeg
from actions.tests.browser import chromium, sign_in
from actions.tests.factories import made_up_address
from actions.tests.test_bridges import CARD, executed_bridge_swap
from actions.tests.test_enduser_browser import audit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tokens(monkeypatch):
    from chain import contracts

    monkeypatch.setattr(contracts, "demo_token_address", made_up_address)


def test_a_refunded_swap_on_a_phone_in_portuguese(
    live_server, django_user_model, application, tokens, tmp_path
):
    user = django_user_model.objects.create_user(
        username="ana", email="ana@example.test", password="ana-password"
    )
    action = executed_bridge_swap(user, application)
    BridgeLeg.objects.filter(action=action).update(
        status="DONE",
        substatus="REFUNDED",
        received_amount="10",
        received_symbol="USDC",
        receiving_chain_id=CARD,
        receiving_tx_hash="0x" + "ee" * 32,
    )
    with chromium("pt-BR", width=390) as page:
        sign_in(page, live_server.url, "ana", "ana-password")
        page.goto(f"{live_server.url}/sign/{action.pk}/")
        badge = page.locator('strong.badge[data-status="executed"]')
        assert badge.get_attribute("class") == "badge badge-neutral"
        assert badge.inner_text().strip() == "Reembolsado"
        assert page.locator("#done").count() == 0
        leg = page.locator("#bridge-leg")
        assert "devolveu os seus 10 USDC à sua conta em Gnosis (local)" in leg.inner_text()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        audit(page, "pt-BR", "swap-refunded", tmp_path)
        # The whole page: the status is below the fold on a phone.
        shots = Path(os.environ.get("PICNIC_SCREENSHOT_DIR") or tmp_path)
        page.screenshot(path=str(shots / "enduser-pt-BR-swap-refunded.png"), full_page=True)
