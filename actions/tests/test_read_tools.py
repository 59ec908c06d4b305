"""get_smart_accounts and get_balances on the local chain: balances read in one JSON-RPC
batch, exact decimals, fiat values from a CoinGecko-shaped source, and no fiat (with the
reason) when that source is down; other users' accounts invisible."""

from __future__ import annotations

import pytest

from chain import contracts
from chain.dev import mint
from dev.demo.actions import provision_card
from dev.providers.local_coingecko import LocalCoinGeckoServer

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.fixture
def prices(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    with LocalCoinGeckoServer() as server:
        settings.PRICE_API_URL = server.url
        settings.PRICE_API_TIMEOUT_SECONDS = 0.5
        yield server


@pytest.fixture
def read_token(user, application, make_token):
    return make_token(user, application, scope="read:balances read:accounts")


def test_smart_accounts_are_the_passkeys_picnic_account_and_its_gnosis_pay_safe(
    registered, user, api_client, read_token, other_user, make_token, application
):
    account = registered[1]
    card = provision_card(user=user, card_id="c-1", last4="4242")
    body = api_client.get("/api/v1/smart-accounts", read_token).json()
    # The passkey's account on every chain (one address), then the card's Safe.
    assert body == {
        "smartAccounts": [
            {
                "address": account.address,
                "chainId": chain_id,
                "caip2": f"eip155:{chain_id}",
                "accountId": f"eip155:{chain_id}:{account.address}",
                "accountType": "picnic",
                "entryPointVersion": "0.7",
            }
            for chain_id in (31337, 31338)
        ]
        + [
            {
                "address": card.safe_address,
                "chainId": 31337,
                "caip2": "eip155:31337",
                "accountId": f"eip155:31337:{card.safe_address}",
                "accountType": "gnosisPay",
                "owner": account.address,
            },
        ]
    }
    theirs = make_token(other_user, application, scope="read:accounts")
    assert api_client.get("/api/v1/smart-accounts", theirs).json() == {"smartAccounts": []}


def test_balances_come_from_the_chain_with_exact_decimals_and_fiat(
    registered, user, api_client, read_token, prices
):
    account, w3 = registered[1], registered[2]
    mint(w3, "EURe", account.address, 1_234_500_000_000_000_001)  # 1.234500000000000001 EURe
    body = api_client.get("/api/v1/balances", read_token).json()
    by_symbol = {b["symbol"]: b for b in body["balances"] if b["chainId"] == 31337}
    usdc, eure = by_symbol["USDC"], by_symbol["EURe"]
    assert usdc["amount"] == "10" and usdc["units"] == "10000000"  # the fixture minted 10 USDC
    import jsonschema

    from actions.contract import BALANCES_SCHEMA

    jsonschema.validate(body, BALANCES_SCHEMA)
    assert usdc["assetId"] == f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}"
    assert usdc["fiat"] == {"USD": "10.00", "EUR": "9.20", "BRL": "53.00"}
    assert eure["amount"] == "1.234500000000000001" and eure["decimals"] == 18
    assert eure["fiat"] == {"USD": "1.33", "EUR": "1.23", "BRL": "7.10"}
    assert body["fiatAvailable"] is True and body["fiatError"] is None
    assert prices.requests == [
        {"ids": "monerium-eur-money,usd-coin", "vs_currencies": "usd,eur,brl"}
    ]


@pytest.mark.parametrize("mode", ["error", "hang", "drop", "garbage"])
def test_a_price_source_that_fails_gives_balances_without_fiat_and_says_why(
    registered, api_client, read_token, prices, mode
):
    prices.mode = mode
    body = api_client.get("/api/v1/balances", read_token).json()
    assert body["fiatAvailable"] is False and body["fiatError"]
    assert all(b["fiat"] is None for b in body["balances"])
    card_chain = [b for b in body["balances"] if b["chainId"] == 31337]
    assert {b["symbol"]: b["amount"] for b in card_chain}["USDC"] == "10"


def test_balances_need_their_scope(registered, api_client, user, application, make_token):
    token = make_token(user, application, scope="read:accounts")
    response = api_client.get("/api/v1/balances", token)
    assert response.status_code == 403
    assert response.json()["detail"] == (
        "Insufficient scope: this call requires the scope read:balances"
    )


def test_all_balances_are_read_in_one_rpc_round_trip_per_chain(
    registered, user, prices, chain_settings, l2_chain, settings
):
    from actions.tests.test_chains import NodeProxy
    from actions.tool_reads import balances_for_user
    from core.chains import with_endpoints

    # On the card's chain a second account (the card's Safe): 2 accounts × 3 tokens (USDC,
    # EURe, the svUSDC vault share), plus the vault's share price, all read by one eth_call in
    # one batch; on the L2 the passkey account's 3 tokens and the share price, the same.
    provision_card(user=user, card_id="c-2", last4="1111")
    with NodeProxy(chain_settings.rpc_url) as card, NodeProxy(l2_chain.rpc_url) as l2:
        settings.CHAINS = with_endpoints(31337, rpc_url=card.url)
        settings.CHAINS = with_endpoints(31338, rpc_url=l2.url)
        body = balances_for_user(user=user)
    assert len(body["balances"]) == 9
    assert (card.batches, l2.batches) == ([1], [1])


def test_get_card_reads_balance_and_daily_limit_from_the_chain_and_virtual_cards_inherit(
    registered, user, api_client, application, make_token, settings
):
    from actions.card.models import Card
    from actions.execution.services import action_reconcile, action_submit
    from actions.tests.test_card_limit import advance, proposed, sign
    from core.lifecycle import Actor

    settings.CARD_DELAY_COOLDOWN_SECONDS = 2
    w3 = registered[2]
    card = provision_card(user=user, card_id="phys-1", last4="4242")
    mint(w3, "EURe", card.safe_address, 42 * 10**18)
    token = make_token(user, application, scope="read:card read:actions write:actions")

    body = api_client.get("/api/v1/card", token).json()
    assert body["state"] == "unknown" and body["stateConfirmedAt"] is None
    assert body["balances"][0]["currency"] == "EURe" and body["balances"][0]["amount"] == "42"
    assert body["allowance"]["dailyLimit"] == "0"

    action = sign(registered, user, proposed(api_client, token, "150"))
    assert action_submit(action_id=action.pk).status == "broadcast"
    assert api_client.get("/api/v1/card", token).json()["allowance"]["queuedChanges"] == 1
    advance(w3, 3)
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "executed"

    body = api_client.get("/api/v1/card", token).json()
    allowance = body["allowance"]
    assert allowance["dailyLimit"] == "150" and allowance["remaining"] == "150"
    assert allowance["period"]["seconds"] == 86400 and allowance["period"]["resetsAt"]
    assert allowance["queuedChanges"] == 0 and allowance["cooldownSeconds"] == 2

    Card.objects.create(
        user=user,
        card_id="virt-1",
        last4="0001",
        safe_address="",
        chain_id=31337,
        is_virtual=True,
        physical=card,
    )
    import jsonschema

    from actions.contract import CARD_SCHEMA

    jsonschema.validate(body, CARD_SCHEMA)  # what the MCP tool declares
    virtual = api_client.get("/api/v1/card?card_id=virt-1", token).json()
    assert virtual["virtual"] is True and virtual["physicalCardId"] == "phys-1"
    assert virtual["balances"] == body["balances"] and virtual["allowance"] == allowance
    assert api_client.get("/api/v1/card?card_id=nope", token).status_code == 404
