"""The issue's two sentences, end to end as an agent and a user live them: proposed over MCP
(the official Python SDK client on the real streamable-HTTP server in front of the live API),
signed in Debian's Chromium with a CDP virtual authenticator, mined by the real bundlers of the
two local chains, and read back over MCP and on the staff timeline.

1. "send 5 USDC to merchant.eth" (ENS on the card's chain);
2. "swap 10 USDC on the L2 into EURe on the card's chain" (the local LI.FI server's relayer
   delivers the destination leg)."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from web3 import Web3

from actions.accounts.models import SmartAccount
from actions.execution.models import Action
from actions.tests.bridges import leg_settles, local_bridge
from actions.tests.browser import (  # noqa: F401
    browser_page,
    passkey_user,
    register_passkey,
    sign_on_page,
)
from actions.tests.factories import demo_asset_id
from chain import ens
from chain.dev import fund, mint, token_balance
from dev.demo.actions import demo_owner_key, seed_ens_names
from mcp_adapter.tests.conftest import run

pytestmark = [pytest.mark.chain, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCOPES = "read:actions write:actions"


def mcp_call(url: str, token: str, name: str, arguments: dict[str, Any]):
    """One tool call with the official SDK client over streamable HTTP, its answer checked by
    the client against the tool's output schema (the server publishes them). It runs in a thread of its own: Playwright's
    sync API keeps an event loop in the test's thread."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main():
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http_client:
            async with Client(streamable_http_client(url, http_client=http_client)) as client:
                # The tool's output schema is known before the call, so the SDK checks the answer.
                listed = {tool.name: tool for tool in (await client.list_tools()).tools}
                assert listed[name].output_schema, f"{name} publishes no output schema"
                return await client.call_tool(name, arguments)

    answer: list = []
    thread = threading.Thread(target=lambda: answer.append(run(main)))
    thread.start()
    thread.join(timeout=120)
    assert answer, f"the MCP call {name} did not return"
    result = answer[0]
    assert result.is_error is False, result.content
    return result.structured_content


def test_send_5_usdc_to_merchant_eth_over_mcp_signed_in_chromium(
    browser_page,  # noqa: F811 - the imported fixture
    live_server,
    staff_client,
    http_server,
    chain_world,
    application,
    make_token,
):
    page = browser_page
    user, account, card = passkey_user(page, live_server.url, "alice", usdc=10_000_000)
    # The demo names as `make run` seeds them (alice.eth → this passkey account).
    owner_key = demo_owner_key(user.username)
    seed_ens_names(user=user, account=account, owner_key=owner_key, say=lambda _: None)
    merchant = card.eth.account.from_key(ens.MERCHANT_KEY).address
    before = token_balance(card, "USDC", merchant)
    token = make_token(user, application, scope=SCOPES)

    with http_server(output_schemas=True) as http:
        usdc = demo_asset_id(31337, "USDC")
        proposed = mcp_call(
            http.url,
            token.token,
            "transfer",
            {"asset_id": usdc, "amount": "5", "to": "merchant.eth"},
        )
        assert proposed["status"] == "proposed"
        shown = sign_on_page(
            page, proposed["sign_url"], "#headline", "#recipient-address", timeout=120_000
        )
        status = mcp_call(
            http.url, token.token, "get_action_status", {"action_id": proposed["action_id"]}
        )

    assert shown["#headline"] == "Send 5 USDC to merchant.eth"
    assert shown["#recipient-address"] == merchant  # the full checksummed address beside it
    assert token_balance(card, "USDC", merchant) - before == 5_000_000
    action = Action.objects.get(pk=proposed["action_id"])
    assert action.params["to"] == merchant and action.params["ens"] == "merchant.eth"
    assert status["status"] == "executed" and status["tx_hash"] == action.tx_hash
    # The chain by its name, never "31337"; the name with the address it resolved to.
    summary = f"Send 5 USDC to merchant.eth ({merchant}) on Gnosis (local)"
    assert proposed["summary"] == status["summary"] == summary
    assert [row["status"] for row in status["status_history"]] == [
        "proposed",
        "signed",
        "submitted",
        "broadcast",
        "executed",
    ]
    # The staff timeline names the recipient both ways, and the chain in words.
    timeline = staff_client.get(f"/staff/actions/{action.pk}/").text
    recipient = re.search(r'<dd id="recipient">(.*?)</dd>', timeline, re.S)[1]
    assert recipient.startswith("<strong>merchant.eth</strong> ") and merchant in recipient
    assert "Gnosis (local)" in timeline


def test_swap_10_usdc_on_the_l2_into_eure_on_the_cards_chain_over_mcp(
    browser_page,  # noqa: F811 - the imported fixture
    live_server,
    http_server,
    chain_world,
    django_user_model,
    application,
    make_token,
    staff_client,
    settings,
):
    page = browser_page
    card_id, l2_id = chain_world.card.chain_id, chain_world.l2.chain_id
    # The relayer delivers a second after it sees the source transaction; we poll often.
    with local_bridge(chain_world, settings, bridge_delay=1.0):
        user = django_user_model.objects.create_user("alice", password="alice-password")
        register_passkey(page, live_server.url, user, "alice-password")
        account = SmartAccount.objects.get(user=user, passkey__isnull=False, chain_id=l2_id)
        card = Web3(Web3.HTTPProvider(chain_world.card.rpc_url))
        l2 = Web3(Web3.HTTPProvider(chain_world.l2.rpc_url))
        fund(l2, account.address, Web3.to_wei(1, "ether"))
        mint(l2, "USDC", account.address, 10_000_000)
        eure_before = token_balance(card, "EURe", account.address)
        token = make_token(user, application, scope=SCOPES)

        with http_server(output_schemas=True) as http:
            arguments = {
                "from_asset_id": demo_asset_id(l2_id, "USDC"),
                "to_asset_id": demo_asset_id(card_id, "EURe"),
                "amount": "10",
            }
            proposed = mcp_call(http.url, token.token, "swap", arguments)
            shown = sign_on_page(
                page, proposed["sign_url"], "#arrives-on", "#bridge-steps", timeout=120_000
            )
            action = Action.objects.get(pk=proposed["action_id"])
            assert action.chain_id == l2_id
            assert token_balance(l2, "USDC", account.address) == 0  # the source leg, on the L2

            leg = leg_settles(action)
            # The signing page, left open, shows the delivery by itself (the leg keeps it live).
            page.wait_for_selector('#bridge-leg[data-bridge-status="DONE"]', timeout=30_000)
            delivered_text = page.inner_text("#bridge-leg")
            status = mcp_call(
                http.url, token.token, "get_action_status", {"action_id": proposed["action_id"]}
            )

    assert shown["#arrives-on"] == "Gnosis (local)"
    assert shown["#bridge-steps"] == (
        "This swap has two steps: your 10 USDC leave your account on Base (local), then "
        "a bridge delivers EURe to your account on Gnosis (local), usually within minutes."
    )
    assert delivered_text.startswith("Received 9.1448 EURe on Gnosis (local) (transaction ")
    assert (leg.status, leg.substatus, leg.receiving_chain_id) == ("DONE", "COMPLETED", card_id)
    assert card.eth.get_transaction_receipt(leg.receiving_tx_hash)["status"] == 1
    # 10 USDC at the demo rate (0.92 EURe) less the bridge's 0.6%, on the card's chain.
    assert token_balance(card, "EURe", account.address) - eure_before == 9_144_800_000_000_000_000
    assert status["status"] == "executed" and status["chain_id"] == l2_id
    assert status["status_history"][-1] == {
        **status["status_history"][-1],
        "status": "executed",
        "detail": (
            f"destination leg: received 9.1448 EURe on Gnosis (local), tx {leg.receiving_tx_hash}"
        ),
    }
    assert status["summary"].startswith(
        "Swap 10 USDC on Base (local) for at least 9.099076 EURe on Gnosis (local)"
    )
    action.refresh_from_db()
    timeline = staff_client.get(f"/staff/actions/{action.pk}/").text
    assert f"included in block {action.block_number}" in timeline  # the source leg
    assert "destination leg: received 9.1448 EURe on Gnosis (local)" in timeline
