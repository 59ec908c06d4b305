"""Cross-chain swaps on the two real local chains: proposed over the API, signed with the
software passkey, the source transaction mined on the card's chain by the real bundler, the
local LI.FI server's relayer delivering (or refunding, or delivering another token, or never)
on the other chain, our reconciliation following /v1/status, and every page saying it."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from web3 import Web3

from actions.bridges.models import BridgeLeg
from actions.bridges.services import bridge_reconcile, bridges_reconcile_pending
from actions.execution.models import Action
from actions.execution.services import action_submit, actions_reconcile_pending
from actions.execution.signing import action_sign
from actions.history.services import history_sync
from actions.presenters import transactions_page
from actions.tests.bridges import leg_settles, local_bridge
from actions.tests.factories import demo_asset_id
from actions.tests.test_api_status import FIELDS
from chain.dev import fund, mint, token_balance
from chain.stack import free_port
from console.selectors import Filters, needs_attention
from core import chains
from dev.testing import wait_until

from .conftest import usdc_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db]

# 10 USDC at the demo rate (0.92 EURe) less the bridge's 0.6%.
QUOTED_EURE = 9_144_800_000_000_000_000


def l2_eure_id(l2_chain) -> str:
    return demo_asset_id(l2_chain.chain_id, "EURe")


@pytest.fixture
def bridge(chain_world, chain_settings, settings):
    """The local LI.FI server over both chains, its relayer delivering half a second after it
    sees the source transaction."""
    with local_bridge(chain_world, settings, bridge_delay=0.5) as server:
        yield server


def sign_and_execute(passkey, user, action: Action) -> Action:
    """Sign `action` with the passkey, submit it, and let the real bundler mine it."""
    action_sign(
        action_id=action.pk,
        user=user,
        credential_json=json.dumps(passkey.get_json(bytes.fromhex(action.user_op_hash[2:]))),
    )
    assert action_submit(action_id=action.pk).status == "broadcast"

    def executed():
        actions_reconcile_pending()
        return Action.objects.get(pk=action.pk).status == "executed"

    wait_until(executed, timeout=60, interval=0.5)
    return Action.objects.get(pk=action.pk)


def swap_across(api_client, write_token, registered, user, l2_chain) -> Action:
    """Propose 10 USDC on the card's chain → EURe on the L2 over the API, sign it with the
    passkey, and let the real bundler mine the source transaction."""
    passkey, account, w3 = registered
    response = api_client.post(
        "/api/v1/actions/swap",
        write_token,
        {"from_asset_id": usdc_id(), "to_asset_id": l2_eure_id(l2_chain), "amount": "10"},
    )
    assert response.status_code == 201, response.content
    return sign_and_execute(passkey, user, Action.objects.get(pk=response.json()["action_id"]))


def status_body(api_client, write_token, action) -> dict:
    answer = api_client.get(f"/api/v1/actions/{action.pk}", write_token)
    assert answer.status_code == 200
    return answer.json()


def history_details(api_client, write_token, action) -> list[str]:
    return [row["detail"] for row in status_body(api_client, write_token, action)["status_history"]]


def test_a_cross_chain_swap_runs_end_to_end_and_every_page_shows_both_legs(
    bridge, registered, api_client, write_token, user, staff_user, client, l2_chain, chain
):
    _, account, w3 = registered
    l2 = Web3(Web3.HTTPProvider(l2_chain.rpc_url))
    eure_before = token_balance(l2, "EURe", account.address)
    action = swap_across(api_client, write_token, registered, user, l2_chain)
    assert action.chain_id == chain.chain_id
    assert action.summary == (
        "Swap 10 USDC on Gnosis (local) for at least 9.099076 EURe on Base (local) (quoted "
        "9.1448) via demo-bridge, slippage 0.5%. Two legs: the action is executed when the "
        "source transaction is mined on Gnosis (local); the bridge then delivers on Base "
        "(local), reported in the status history (destination leg)"
    )
    # The source leg: the tokens left the account on the card's chain, to the escrow.
    assert token_balance(w3, "USDC", account.address) == 0
    assert token_balance(w3, "USDC", bridge.escrow) >= 10_000_000

    leg = leg_settles(action)
    assert (leg.status, leg.substatus) == ("DONE", "COMPLETED")
    assert (leg.received_amount, leg.received_symbol) == ("9.1448", "EURe")
    assert leg.receiving_chain_id == l2_chain.chain_id and leg.done_at is not None
    # The destination leg on the other chain: a real transaction, the balance changed.
    assert l2.eth.get_transaction_receipt(leg.receiving_tx_hash)["status"] == 1
    assert token_balance(l2, "EURe", account.address) - eure_before == QUOTED_EURE

    # get_action_status: the seed's shape, executed, the second leg in the history.
    body = status_body(api_client, write_token, action)
    assert body["status"] == "executed" and body["chain_id"] == chain.chain_id
    details = [row["detail"] for row in body["status_history"]]
    assert [row["status"] for row in body["status_history"]][:5] == [
        "proposed",
        "signed",
        "submitted",
        "broadcast",
        "executed",
    ]
    assert details[4].startswith("included in block")
    assert details[-1] == (
        f"destination leg: received 9.1448 EURe on Base (local), tx {leg.receiving_tx_hash}"
    )
    assert set(body) == set(FIELDS)

    # get_transactions: one swap line with both legs' receipts and what arrived.
    history_sync(user=user)
    line = next(
        t for t in transactions_page(user=user)["transactions"] if t["actionId"] == str(action.pk)
    )
    assert line["type"] == "swap" and line["swap"]["crossChain"] is True
    assert line["swap"]["toAmountReceived"] == "9.1448"
    assert line["receipts"] == [
        {
            "chainId": chain.chain_id,
            "caip2": f"eip155:{chain.chain_id}",
            "txHash": action.tx_hash.lower(),
        },
        {
            "chainId": l2_chain.chain_id,
            "caip2": f"eip155:{l2_chain.chain_id}",
            "txHash": leg.receiving_tx_hash.lower(),
        },
    ]

    # The signing page and the staff timeline say both legs.
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/").text
    assert "Included in block" in page
    assert "Received 9.1448 EURe on Base (local)" in page
    assert 'data-bridge-status="DONE"' in page
    client.force_login(staff_user)
    staff = client.get(f"/staff/actions/{action.pk}/").text
    assert f"included in block {action.block_number}" in staff
    assert "destination leg: received 9.1448 EURe on Base (local)" in staff


def test_a_refund_sends_the_tokens_back_on_the_source_chain_and_says_so(
    bridge, registered, api_client, write_token, user, client, l2_chain
):
    _, account, w3 = registered
    bridge.bridge_mode = "refund"
    l2 = Web3(Web3.HTTPProvider(l2_chain.rpc_url))
    eure_before = token_balance(l2, "EURe", account.address)
    action = swap_across(api_client, write_token, registered, user, l2_chain)
    leg = leg_settles(action)
    assert (leg.status, leg.substatus) == ("DONE", "REFUNDED")
    assert (leg.received_amount, leg.received_symbol) == ("10", "USDC")
    assert leg.receiving_chain_id == action.chain_id
    assert w3.eth.get_transaction_receipt(leg.receiving_tx_hash)["status"] == 1
    assert token_balance(w3, "USDC", account.address) == 10_000_000  # back where it was
    assert token_balance(l2, "EURe", account.address) == eure_before
    assert Action.objects.get(pk=action.pk).status == "executed"
    details = history_details(api_client, write_token, action)
    assert details[-1].startswith("destination leg: refunded 10 USDC on Gnosis (local), tx ")
    # The status stays the seed's; the outcome says the swap did not happen.
    body = status_body(api_client, write_token, action)
    assert (body["status"], body["outcome"]) == ("executed", "refunded")
    assert body["outcome_detail"].startswith(
        f"refunded 10 USDC on Gnosis (local), tx {leg.receiving_tx_hash}"
    )
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/").text
    assert "so it sent your 10 USDC back to your account on Gnosis (local)" in page
    assert 'data-outcome="refunded"' in page and 'id="done"' not in page


def test_a_partial_delivery_is_another_token_on_the_destination_chain(
    bridge, registered, api_client, write_token, user, client, l2_chain
):
    _, account, _w3 = registered
    bridge.bridge_mode = "partial"
    l2 = Web3(Web3.HTTPProvider(l2_chain.rpc_url))
    usdc_before = token_balance(l2, "USDC", account.address)
    action = swap_across(api_client, write_token, registered, user, l2_chain)
    leg = leg_settles(action)
    assert (leg.status, leg.substatus) == ("DONE", "PARTIAL")
    assert (leg.received_amount, leg.received_symbol) == ("9.94", "USDC")
    assert token_balance(l2, "USDC", account.address) - usdc_before == 9_940_000
    details = history_details(api_client, write_token, action)
    assert "instead of EURe: the bridge delivered another token (DONE, PARTIAL)" in details[-1]
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="pt-br").text
    assert "você recebeu 9,94 USDC em Base (local) em vez de EURe" in page


def test_a_bridge_that_never_delivers_is_flagged_after_its_deadline_and_stays_reconcilable(
    bridge, registered, api_client, write_token, user, l2_chain, settings
):
    bridge.bridge_mode = "never"
    action = swap_across(api_client, write_token, registered, user, l2_chain)

    def polled_twice():
        bridges_reconcile_pending()
        return BridgeLeg.objects.get(action=action).checks >= 2

    wait_until(polled_twice, timeout=30, interval=0.3)
    leg = BridgeLeg.objects.get(action=action)
    assert (leg.status, leg.substatus) == ("PENDING", "WAIT_DESTINATION_TRANSACTION")
    assert not any(r.id == str(action.pk) for r in needs_attention(Filters()).rows)
    # Hours later (the clock moved by rewriting when it ran): listed, flagged, not ended.
    settings.BRIDGE_STUCK_AFTER_MINUTES = 30
    settings.BRIDGE_DEADLINE_MINUTES = 120
    long_ago = timezone.now() - timedelta(minutes=180)
    Action.objects.filter(pk=action.pk).update(executed_at=long_ago)
    BridgeLeg.objects.filter(pk=leg.pk).update(
        started_at=long_ago, deadline=long_ago + timedelta(minutes=120)
    )
    rows = {r.id: r.why for r in needs_attention(Filters()).rows}
    assert rows[str(action.pk)] == "bridge past its deadline"
    assert bridge_reconcile(leg_id=leg.pk) == "PENDING"
    leg.refresh_from_db()
    assert leg.done_at is None and not leg.finished
    assert Action.objects.get(pk=action.pk).status == "executed"
    # The bridge comes back to it: the same leg finishes, and leaves the console's list.
    bridge.transfers[action.tx_hash.lower()].mode = "complete"
    leg = leg_settles(action)
    assert (leg.status, leg.substatus) == ("DONE", "COMPLETED")
    assert str(action.pk) not in {r.id for r in needs_attention(Filters()).rows}


def test_with_the_destination_chain_down_the_source_leg_shows_and_the_leg_waits(
    bridge, registered, api_client, write_token, user, client, l2_chain, settings
):
    live = bridge.rpc_urls[l2_chain.chain_id]
    dead = f"http://127.0.0.1:{free_port()}"
    # The L2 is unreachable for the bridge's relayer and for us.
    bridge.rpc_urls[l2_chain.chain_id] = dead
    settings.CHAINS = chains.with_endpoints(l2_chain.chain_id, rpc_url=dead)
    action = swap_across(api_client, write_token, registered, user, l2_chain)

    def chain_not_available():
        bridges_reconcile_pending()
        leg = BridgeLeg.objects.get(action=action)
        return leg if leg.substatus == "CHAIN_NOT_AVAILABLE" else None

    leg = wait_until(chain_not_available, timeout=30, interval=0.3)
    assert leg.status == "PENDING"
    body = status_body(api_client, write_token, action)
    assert body["status"] == "executed" and body["tx_hash"] == action.tx_hash
    assert body["status_history"][-1]["detail"] == (
        "destination leg: waiting: Base (local) is not reachable, the bridge delivers EURe "
        "when it is (PENDING, CHAIN_NOT_AVAILABLE)"
    )
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/").text
    assert "Included in block" in page  # the source leg
    assert "Step 2 is waiting: Base (local) cannot be reached right now" in page

    # The chain is back: the bridge delivers, the leg finishes.
    bridge.rpc_urls[l2_chain.chain_id] = live
    leg = leg_settles(action)
    assert (leg.status, leg.substatus) == ("DONE", "COMPLETED")


def test_lifi_down_at_quote_time_is_a_503_and_proposes_nothing(
    bridge, registered, api_client, write_token, l2_chain
):
    bridge.mode = "unavailable"
    response = api_client.post(
        "/api/v1/actions/swap",
        write_token,
        {"from_asset_id": usdc_id(), "to_asset_id": l2_eure_id(l2_chain), "amount": "10"},
    )
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "swap_provider_unavailable"
    assert body["detail"].startswith("The swap provider (LI.FI) could not be reached")
    assert set(body) >= {"detail", "code", "errors"}
    assert not Action.objects.exists() and not BridgeLeg.objects.exists()


def test_a_swap_from_the_l2_into_eure_on_the_cards_chain(
    bridge, registered, api_client, write_token, user, client, l2_chain, chain
):
    """The issue's example: "swap 10 USDC on the L2 into EURe on the card's chain"."""
    passkey, account, w3 = registered
    l2 = Web3(Web3.HTTPProvider(l2_chain.rpc_url))
    fund(l2, account.address, Web3.to_wei(1, "ether"))
    mint(l2, "USDC", account.address, 10_000_000)
    eure_before = token_balance(w3, "EURe", account.address)
    response = api_client.post(
        "/api/v1/actions/swap",
        write_token,
        {
            "from_asset_id": demo_asset_id(l2_chain.chain_id, "USDC"),
            "to_asset_id": demo_asset_id(chain.chain_id, "EURe"),
            "amount": "10",
        },
    )
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["action_id"])
    assert action.chain_id == l2_chain.chain_id
    assert action.summary.startswith(
        "Swap 10 USDC on Base (local) for at least 9.099076 EURe on Gnosis (local)"
    )
    action = sign_and_execute(passkey, user, action)
    # The source leg on the L2, the destination leg on the card's chain.
    assert l2.eth.get_transaction_receipt(action.tx_hash)["status"] == 1
    assert token_balance(l2, "USDC", account.address) == 0
    leg = leg_settles(action)
    assert (leg.status, leg.substatus, leg.receiving_chain_id) == (
        "DONE",
        "COMPLETED",
        chain.chain_id,
    )
    assert token_balance(w3, "EURe", account.address) - eure_before == QUOTED_EURE
    body = status_body(api_client, write_token, action)
    assert body["status"] == "executed" and body["chain_id"] == l2_chain.chain_id
    assert body["status_history"][-1]["detail"] == (
        f"destination leg: received 9.1448 EURe on Gnosis (local), tx {leg.receiving_tx_hash}"
    )
    client.force_login(user)
    assert "Received 9.1448 EURe on Gnosis (local)" in client.get(f"/sign/{action.pk}/").text
