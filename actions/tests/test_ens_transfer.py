"""`transfer` to an ENS name on the real local chain: resolved at proposal into the signed user
operation, the name and the address stored and shown side by side; every refusal has its code
and writes nothing; a plain address shows its name only when the reverse record points back."""

from __future__ import annotations

import dataclasses
import html
import re

import pytest
from django.test import Client
from eth_utils import keccak
from web3 import Web3

from actions.execution.models import Action, ActionStatusHistory
from actions.tests.factories import said
from chain import ens as local_ens
from chain.dev import fund
from evm.ens import EnsReader

from .conftest import usdc_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.fixture
def merchant(chain_settings) -> str:
    """merchant.eth → the demo merchant's EOA, with its reverse record (as `make run` seeds)."""
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    address = w3.eth.account.from_key(local_ens.MERCHANT_KEY).address
    local_ens.register(w3, "merchant.eth", address)
    local_ens.set_reverse_name_of_eoa(w3, local_ens.MERCHANT_KEY, "merchant.eth")
    return address


@pytest.fixture
def round_trips(monkeypatch) -> list:
    """Every ENS JSON-RPC round trip (one batch each) made while the test runs."""
    made: list = []
    batch = EnsReader._batch

    def counted(self, calls):
        made.append([method for method, _ in calls])
        return batch(self, calls)

    monkeypatch.setattr(EnsReader, "_batch", counted)
    return made


def sign_page(user, action) -> str:
    """The signing page as the user reads it (its own client: staff_client is Django's `client`)."""
    enduser = Client()
    enduser.force_login(user)
    return enduser.get(f"/sign/{action.pk}/").text


def transfer(api_client, token, to: str, amount: str = "1.5"):
    body = {"asset_id": usdc_id(), "amount": amount, "to": to}
    return api_client.post("/api/v1/actions/transfer", token, body)


def test_a_transfer_to_merchant_eth_pays_the_resolved_address_and_keeps_both(
    registered, merchant, api_client, write_token, staff_client, user, round_trips
):
    transfer(api_client, write_token, "merchant.eth")  # the resolver is learnt once per process
    round_trips.clear()
    response = transfer(api_client, write_token, "Merchant.ETH")  # normalised (ENSIP-15)
    assert response.status_code == 201, response.content
    # ENS added exactly one batched round trip to the proposal.
    assert round_trips == [["eth_getCode", "eth_call", "eth_call"]]
    action = Action.objects.get(pk=response.json()["action_id"])
    assert action.params["to"] == merchant
    assert action.params["ens"] == "merchant.eth" and action.params["ens_source"] == "to"
    assert f"merchant.eth ({merchant})" in action.summary
    # The user operation pays the resolved address: ERC-20 transfer(merchant, 1.5 USDC).
    usdc = Web3().eth.contract(
        abi=[
            {
                "type": "function",
                "name": "transfer",
                "inputs": [{"name": "", "type": "address"}, {"name": "", "type": "uint256"}],
                "outputs": [{"name": "", "type": "bool"}],
            }
        ]
    )
    paid = usdc.encode_abi("transfer", [merchant, 1_500_000])[2:]
    assert paid.lower() in action.user_op["callData"].lower()

    page = sign_page(user, action)
    assert "Send 1.5 USDC to merchant.eth" in page
    assert f'<code class="address" id="recipient-address">{merchant}</code>' in page
    staff = staff_client.get(f"/staff/actions/{action.pk}/").text
    recipient = re.search(r'<dd id="recipient">(.*?)</dd>', staff, re.S)[1]
    assert recipient.startswith("<strong>merchant.eth</strong> ") and merchant in recipient


def test_a_plain_address_shows_its_verified_primary_name(
    registered, merchant, api_client, write_token, staff_client, user
):
    response = transfer(api_client, write_token, merchant.lower())
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["action_id"])
    assert action.params["to"] == merchant
    assert action.params["ens"] == "merchant.eth" and action.params["ens_source"] == "reverse"
    page = sign_page(user, action)
    assert "merchant.eth" in page and f'id="recipient-address">{merchant}</code>' in page
    assert "merchant.eth" in staff_client.get(f"/staff/actions/{action.pk}/").text


def test_a_reverse_record_that_does_not_point_back_is_not_shown(
    registered, merchant, api_client, write_token, user, chain_settings
):
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    liar_key = "0x" + keccak(text="picnic test liar").hex()
    liar = w3.eth.account.from_key(liar_key).address
    fund(w3, liar, 10**18)
    local_ens.set_reverse_name_of_eoa(w3, liar_key, "merchant.eth")  # claims merchant's name
    response = transfer(api_client, write_token, liar)
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["action_id"])
    assert action.params["to"] == liar and "ens" not in action.params
    page = sign_page(user, action)
    assert "merchant.eth" not in page and liar in page


@pytest.mark.parametrize(
    ("to", "status", "code", "words"),
    [
        ("раураl.eth", 400, "ens_name_invalid", "multiple groups"),  # Cyrillic + Latin
        ("рау.eth", 400, "ens_name_invalid", "confusable"),  # all Cyrillic, looks like "pay"
        ("a_b.eth", 400, "ens_name_invalid", "Underscores"),
        ("a" * 300 + ".eth", 400, "ens_name_invalid", "longer than 255"),
        ("nobody-has-this-name.eth", 400, "ens_name_not_found", "was not found on Gnosis"),
        ("zero.eth", 400, "ens_name_not_found", "points at no address"),
    ],
)
def test_refused_names_have_their_code_and_write_nothing(
    registered, merchant, api_client, write_token, chain_settings, to, status, code, words
):
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    local_ens.register(w3, "zero.eth", "0x" + "00" * 20)
    response = transfer(api_client, write_token, to)
    assert response.status_code == status, response.content
    assert response.json()["code"] == code
    assert words in said(response)
    assert not Action.objects.exists() and not ActionStatusHistory.objects.exists()


def test_the_chain_table_names_the_local_registry_on_the_card_chain_only(chain_settings):
    from django.conf import settings

    card = next(c for c in settings.CHAINS if c.id == settings.CARD_CHAIN_ID)
    assert card.ens_registry == local_ens.registry_address()
    # The L2 row names none: it is the chain that says "no ENS here".
    assert all(not c.ens_registry for c in settings.CHAINS if c.id != settings.CARD_CHAIN_ID)


def test_a_transfer_on_the_l2_to_a_name_says_that_chain_has_no_ens(
    registered, merchant, api_client, write_token, l2_chain
):
    from actions.accounts.models import Token
    from chain import contracts

    usdc_l2, _ = Token.objects.get_or_create(  # the demo tokens may list the L2's already
        chain_id=l2_chain.chain_id,
        address=contracts.demo_token_address("USDC"),
        defaults={"symbol": "USDC", "name": "Demo USD Coin", "decimals": 6},
    )
    body = {"asset_id": usdc_l2.asset_id, "amount": "1", "to": "merchant.eth"}
    response = api_client.post("/api/v1/actions/transfer", write_token, body)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "ens_not_supported"
    assert response.json()["detail"] == (
        "Base (local) has no ENS registry: send to a 0x address there"
    )
    assert not Action.objects.exists() and not ActionStatusHistory.objects.exists()
    # Nothing answers at the registry's address on the L2 either: it has no ENS deployed.
    l2 = Web3(Web3.HTTPProvider(l2_chain.rpc_url))
    assert l2.eth.get_code(local_ens.registry_address()) == b""


def test_a_chain_without_ens_says_so(registered, merchant, api_client, write_token, settings):
    settings.CHAINS = tuple(
        dataclasses.replace(row, ens_registry="") if row.id == 31337 else row
        for row in settings.CHAINS
    )
    response = transfer(api_client, write_token, "merchant.eth")
    assert response.status_code == 400
    assert response.json()["code"] == "ens_not_supported"
    assert "Gnosis (local) has no ENS registry" in response.json()["detail"]
    assert not Action.objects.exists() and not ActionStatusHistory.objects.exists()
    # A 0x address still works there, without a name.
    response = transfer(api_client, write_token, merchant)
    assert response.status_code == 201
    assert "ens" not in Action.objects.get().params


def test_names_are_escaped_on_the_pages(
    registered, merchant, api_client, write_token, staff_client, user
):
    # Normalised names cannot hold markup, but a stored name is still data, never HTML.
    action = Action.objects.get(
        pk=transfer(api_client, write_token, "merchant.eth").json()["action_id"]
    )
    hostile = '<img src=x onerror="alert(1)">.eth'
    Action.objects.filter(pk=action.pk).update(params={**action.params, "ens": hostile})
    for page in (
        sign_page(user, action),
        staff_client.get(f"/staff/actions/{action.pk}/").text,
    ):
        assert hostile not in page and html.escape(hostile, quote=False)[:20] in page
