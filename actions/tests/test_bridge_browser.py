"""A cross-chain swap signed in Debian's Chromium (Playwright) with a CDP virtual
authenticator: the page says the swap has two steps and where the tokens arrive, the user
signs, the source transaction is mined on the card's chain, and the same page, live, shows
the bridge's delivery on the other chain."""

from __future__ import annotations

import pytest
from web3 import Web3

from actions.execution.models import Action
from actions.tests.bridges import leg_settles, local_bridge
from actions.tests.browser import browser_page, passkey_user, sign_on_page  # noqa: F401
from actions.tests.factories import demo_asset_id
from chain.dev import token_balance

pytestmark = [pytest.mark.chain, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_cross_chain_swap_signed_in_the_browser_shows_both_legs_live(
    browser_page,  # noqa: F811 - the imported fixture
    live_server,
    chain_world,
    application,
    make_token,
    api_client,
    settings,
):
    with local_bridge(chain_world, settings, bridge_delay=1.0):
        page = browser_page
        user, account, card = passkey_user(page, live_server.url, "alice", usdc=10_000_000)
        l2 = Web3(Web3.HTTPProvider(chain_world.l2.rpc_url))
        token = make_token(user, application, scope="read:actions write:actions")
        response = api_client.post(
            "/api/v1/actions/swap",
            token,
            {
                "from_asset_id": demo_asset_id(31337, "USDC"),
                "to_asset_id": demo_asset_id(chain_world.l2.chain_id, "EURe"),
                "amount": "10",
            },
        )
        assert response.status_code == 201, response.content
        proposed = response.json()

        shown = sign_on_page(page, proposed["sign_url"], "#arrives-on", "#bridge-steps")
        assert shown["#arrives-on"] == "Base (local)"
        assert shown["#bridge-steps"] == (
            "This swap has two steps: your 10 USDC leave your account on Gnosis (local), then "
            "a bridge delivers EURe to your account on Base (local), usually within minutes."
        )
        action = Action.objects.get(pk=proposed["action_id"])
        assert token_balance(card, "USDC", account.address) == 0

        leg_settles(action)
        # The page was left open: it re-renders by itself (the leg kept it live).
        page.wait_for_selector('#bridge-leg[data-bridge-status="DONE"]', timeout=30_000)
        assert page.inner_text("#bridge-leg").startswith(
            "Received 9.1448 EURe on Base (local) (transaction "
        )
        assert "Included in block" in page.text_content("#done-technical")
        assert token_balance(l2, "EURe", account.address) == 9_144_800_000_000_000_000
