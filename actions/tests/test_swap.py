"""The swap tool: quotes in LI.FI's shape from a local server, executed on the local chain."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from actions.execution.models import Action
from actions.execution.services import action_submit, actions_reconcile_pending
from actions.execution.signing import action_sign
from actions.history.services import history_sync
from actions.presenters import transactions_page
from actions.providers.lifi import LifiClient, QuoteError
from actions.tests.factories import said
from chain import contracts
from chain.dev import token_balance
from dev.testing import wait_until

from .conftest import usdc_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def eure_id() -> str:
    return f"eip155:31337/erc20:{contracts.demo_token_address('EURe')}"


def swap(api_client, token, **body):
    payload = {"from_asset_id": usdc_id(), "to_asset_id": eure_id(), "amount": "10", **body}
    return api_client.post("/api/v1/actions/swap", token, payload)


def test_a_quoted_swap_is_signed_and_executed_on_chain(
    registered, quotes, api_client, write_token, user
):
    passkey, account, w3 = registered
    response = swap(api_client, write_token, slippage=0.5)
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["action_id"])
    assert action.type == "swap"
    assert action.summary == (
        "Swap 10 USDC for at least 9.154 EURe (quoted 9.2) via demo-dex on Gnosis (local), "
        "slippage 0.5%"
    )
    assert action.params["slippage"] == "0.5" and action.params["provider"] == "demo-dex"
    query = quotes.requests[-1]
    assert (query["fromAmount"], query["slippage"], query["fromAddress"]) == (
        "10000000",
        "0.005",
        account.address,
    )
    action_sign(
        action_id=action.pk,
        user=user,
        credential_json=json.dumps(passkey.get_json(bytes.fromhex(action.user_op_hash[2:]))),
    )
    assert action_submit(action_id=action.pk).status == "broadcast"
    wait_until(
        lambda: (
            actions_reconcile_pending() and Action.objects.get(pk=action.pk).status == "executed"
        ),
        timeout=60,
        interval=0.5,
    )
    assert token_balance(w3, "USDC", account.address) == 0
    assert token_balance(w3, "EURe", account.address) == 92 * 10**17  # 9.2 EURe

    # get_transactions: one swap line, both flows from the chain, the quote beside them.
    action.refresh_from_db()
    history_sync(user=user)
    line = transactions_page(user=user)["transactions"][0]
    assert line["type"] == "swap" and line["actionId"] == str(action.pk)
    assert line["receipts"] == [
        {"chainId": 31337, "caip2": "eip155:31337", "txHash": action.tx_hash.lower()}
    ]
    assert {(f["direction"], f["symbol"], f["formattedAmount"]) for f in line["flows"]} >= {
        ("out", "USDC", "10"),
        ("in", "EURe", "9.2"),
    }
    assert line["swap"] == {
        "fromAssetId": action.params["from_asset_id"],
        "toAssetId": eure_id(),
        "fromAmount": "10",
        "toAmountQuoted": "9.2",
        "toAmountMin": "9.154",
        "toAmountReceived": "9.2",
        "provider": "demo-dex",
        "slippagePercent": "0.5",
        "crossChain": False,
    }


def test_the_signing_page_warns_at_one_percent_slippage_or_more(
    registered, quotes, client, api_client, write_token, user
):
    client.force_login(user)
    low = swap(api_client, write_token, slippage=0.99).json()["action_id"]
    high = swap(api_client, write_token, slippage=1).json()["action_id"]
    assert "slippage-warning" not in client.get(f"/sign/{low}/").text
    page = client.get(f"/sign/{high}/").text
    assert 'id="slippage-warning"' in page and "up to 1%" in page


@pytest.mark.parametrize(
    ("mode", "body", "status", "message"),
    [
        (
            "ok",
            {"to_asset_id": "eip155:100/erc20:0x" + "ab" * 20},
            400,
            "chain 100 is not served here",
        ),
        (
            "ok",
            {"to_asset_id": "eip155:31337/erc20:0x" + "ab" * 20},
            400,
            "no swap quote: No available quotes",
        ),
        ("ok", {"slippage": 75}, 400, "slippage: 75 is greater than the maximum of 50"),
        ("ok", {"to_asset_id": "USDC"}, 400, "same token"),
        # LI.FI down, failing or silent: an outage (503), not the request's fault.
        ("error", {}, 503, "could not be reached, so no quote could be made"),
        ("unavailable", {}, 503, "Service temporarily unavailable (HTTP 503)"),
        ("hang", {}, 503, "the swap provider is unavailable: no answer within 1s"),
        ("drop", {}, 503, "the swap provider is unavailable: connection lost"),
    ],
)
def test_quote_failures_are_clear_and_propose_nothing(
    registered, quotes, api_client, write_token, mode, body, status, message
):
    quotes.mode = mode
    if body.get("to_asset_id") == "USDC":
        body = {**body, "to_asset_id": usdc_id()}  # resolved after the stack compiled the tokens
    response = swap(api_client, write_token, **body)
    assert response.status_code == status
    assert message in said(response)
    if status == 503:
        assert response.json()["code"] == "swap_provider_unavailable"
    assert not Action.objects.exists()


def test_the_adapter_parses_the_quote_shape(quotes):
    quote = LifiClient(quotes.url, timeout=2).quote(
        from_chain=31337,
        to_chain=31337,
        from_token=contracts.demo_token_address("EURe"),
        to_token=contracts.demo_token_address("USDC"),
        from_amount=10**18,
        from_address="0x" + "11" * 20,
        slippage_percent=Decimal("1"),
    )
    assert (quote.to_amount, quote.to_amount_min) == (1_080_000, 1_069_200)
    assert quote.approval_address == quote.tx_to == contracts.swap_router_address()
    assert quote.to_token["symbol"] == "USDC" and quote.tx_chain_id == 31337
    with pytest.raises(QuoteError, match="unavailable"):
        LifiClient("http://127.0.0.1:9", timeout=1).quote(
            from_chain=1,
            to_chain=1,
            from_token="0x",
            to_token="0x",
            from_amount=1,
            from_address="0x",
            slippage_percent=Decimal("1"),
        )
