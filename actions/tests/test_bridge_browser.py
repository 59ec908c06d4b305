"""A cross-chain swap signed in Debian's Chromium (Playwright) with a CDP virtual
authenticator: the page says the swap has two steps and where the tokens arrive, the user
signs, the source transaction is mined on the card's chain, and the same page, live, shows
the bridge's delivery on the other chain."""

from __future__ import annotations

import pytest
from web3 import Web3

from actions.models import Action, BridgeLeg, SmartAccount
from actions.providers.local_lifi import LocalLifiServer
from actions.services.bridges import bridges_reconcile_pending
from actions.tests.test_signing_browser import browser_page  # noqa: F401 - shared fixture
from chain import contracts
from chain.dev import fund, mint, token_balance
from core.testing import wait_until

pytestmark = [pytest.mark.chain, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_cross_chain_swap_signed_in_the_browser_shows_both_legs_live(
    browser_page,  # noqa: F811 - the imported fixture
    live_server,
    chain_world,
    django_user_model,
    application,
    make_token,
    api_client,
    settings,
):
    rpc_urls = {local.chain_id: local.rpc_url for local in chain_world.chains}
    with LocalLifiServer(rpc_urls=rpc_urls, bridge_delay=1.0, tick_seconds=0.1) as bridge:
        settings.SWAP_QUOTE_URL = bridge.url
        settings.SWAP_QUOTE_TIMEOUT_SECONDS = 5.0
        settings.BRIDGE_POLL_SECONDS = 0.2
        settings.BRIDGE_POLL_MAX_SECONDS = 1.0
        page = browser_page
        user = django_user_model.objects.create_user("alice", password="alice-password")
        page.goto(f"{live_server.url}/accounts/login/?next=/passkeys/")
        page.fill("input[name=username]", "alice")
        page.fill("input[name=password]", "alice-password")
        page.click("#sign-in")
        page.click("#register-passkey")
        page.wait_for_selector("li.passkey", timeout=30_000)
        account = SmartAccount.objects.get(user=user, passkey__isnull=False, chain_id=31337)
        card = Web3(Web3.HTTPProvider(chain_world.card.rpc_url))
        l2 = Web3(Web3.HTTPProvider(chain_world.l2.rpc_url))
        fund(card, account.address, Web3.to_wei(1, "ether"))
        mint(card, "USDC", account.address, 10_000_000)
        token = make_token(user, application, scope="read:actions write:actions")
        eure = contracts.demo_token_address("EURe")
        response = api_client.post(
            "/api/v1/actions/swap",
            token,
            {
                "from_asset_id": f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}",
                "to_asset_id": f"eip155:{chain_world.l2.chain_id}/erc20:{eure}",
                "amount": "10",
            },
        )
        assert response.status_code == 201, response.content
        proposed = response.json()

        page.goto(proposed["sign_url"])
        assert page.inner_text("#arrives-on") == "Base (local)"
        assert page.inner_text("#bridge-steps") == (
            "This swap has two steps: your 10 USDC leave your account on Gnosis (local), then "
            "a bridge delivers EURe to your account on Base (local), usually within minutes."
        )
        page.click("#approve")
        page.wait_for_selector('[data-status="executed"]', timeout=90_000)
        action = Action.objects.get(pk=proposed["action_id"])
        assert token_balance(card, "USDC", account.address) == 0

        # The beat's work, done here: poll the bridge until it has delivered.
        def delivered():
            bridges_reconcile_pending()
            return BridgeLeg.objects.get(action=action).finished

        wait_until(delivered, timeout=60, interval=0.3)
        # The page was left open: it re-renders by itself (the leg kept it live).
        page.wait_for_selector('#bridge-leg[data-bridge-status="DONE"]', timeout=30_000)
        assert page.inner_text("#bridge-leg").startswith(
            "Received 9.1448 EURe on Base (local) (transaction "
        )
        assert "Included in block" in page.text_content("#done-technical")
        assert token_balance(l2, "EURe", account.address) == 9_144_800_000_000_000_000
