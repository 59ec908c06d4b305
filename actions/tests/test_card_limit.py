"""card_limit: the daily limit is the Roles allowance of the card's Safe; the change is a
passkey-signed Zodiac module transaction, relayed into the Safe's Delay modifier (not 4337),
`broadcast` through the cooldown, `executed` when dispatched, `failed` on revert or expiry."""

from __future__ import annotations

import json

import pytest
from web3 import Web3

from actions.execution.models import Action, ActionStatus
from actions.execution.services import action_reconcile, action_submit
from actions.execution.signing import action_sign
from actions.tests.factories import said
from core.chains import card_chain, with_endpoints
from core.lifecycle import Actor
from dev.demo.actions import provision_card
from dev.testing import history_statuses
from evm import zodiac

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.fixture
def delay_settings(settings):
    settings.CARD_DELAY_COOLDOWN_SECONDS = 2
    settings.CARD_DELAY_EXPIRATION_SECONDS = 600
    return settings


@pytest.fixture
def card(registered, user, delay_settings):
    return provision_card(user=user, card_id="card-limit-1", last4="4242")


def propose(api_client, token, body: dict):
    return api_client.post("/api/v1/actions/card_limit", token, body)


def proposed(api_client, token, limit: str = "250") -> Action:
    response = propose(api_client, token, {"daily_limit": limit})
    assert response.status_code == 201, response.content
    return Action.objects.get(pk=response.json()["action_id"])


def sign(registered, user, action: Action) -> Action:
    challenge = bytes.fromhex(action.params["challenge"][2:])
    return action_sign(
        action_id=action.pk,
        user=user,
        credential_json=json.dumps(registered[0].get_json(challenge)),
    )


def allowance(w3: Web3, card) -> tuple:
    roles = w3.eth.contract(address=card.roles_address, abi=zodiac.abi("RolesV2"))
    return tuple(roles.functions.allowances(zodiac.SPENDING_ALLOWANCE_KEY).call())


def advance(w3: Web3, seconds: int) -> None:
    """Let chain time pass (the Delay judges by block time): a live chain mines blocks."""
    w3.provider.make_request("evm_increaseTime", [seconds])
    w3.provider.make_request("evm_mine", [])


def test_it_enqueues_the_change_waits_for_the_cooldown_then_executes(
    registered, card, api_client, write_token, user
):
    w3 = registered[2]
    action = proposed(api_client, write_token)
    assert action.type == "cardLimitSet" and action.user_op_hash is None
    assert action.summary.startswith(
        "Set the daily limit of your Picnic card •••• 4242 to 250 EURe"
    )
    assert action.smart_account == card.safe_address
    sign(registered, user, action)

    action = action_submit(action_id=action.pk)
    assert action.status == ActionStatus.BROADCAST, action.error
    assert action.broadcast_at is not None and action.tx_hash is None
    assert action.params["queue_nonce"] == 0
    assert allowance(w3, card)[0] == 0  # nothing changed yet: the Delay holds it

    # During the cooldown reconciliation leaves it broadcast and dispatches nothing.
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "pending"
    action.refresh_from_db()
    assert action.status == ActionStatus.BROADCAST and "dispatch_tx" not in action.params

    advance(w3, 3)
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "executed"
    action.refresh_from_db()
    assert action.tx_hash == action.params["dispatch_tx"] and action.block_number
    assert action.executed_at is not None and action.error is None
    units = 250 * 10**18
    assert allowance(w3, card)[:4] == (units, units, 86400, units)
    assert history_statuses(action) == ["proposed", "signed", "submitted", "broadcast", "executed"]
    executed = action.history.order_by("timestamp", "id").last()
    assert "daily limit of card •••• 4242 is now 250 EURe" in executed.detail
    assert executed.payload["status"] == 1

    status = api_client.get(f"/api/v1/actions/{action.pk}", write_token).json()
    assert status["status"] == "executed" and status["tx_hash"] == action.tx_hash


def test_a_change_nobody_dispatched_in_time_expires(
    registered, user, api_client, write_token, delay_settings
):
    delay_settings.CARD_DELAY_COOLDOWN_SECONDS = 1
    delay_settings.CARD_DELAY_EXPIRATION_SECONDS = 60  # the Delay's minimum
    provision_card(user=user, card_id="card-limit-2", last4="1111")
    action = proposed(api_client, write_token, "10")
    sign(registered, user, action)
    assert action_submit(action_id=action.pk).status == ActionStatus.BROADCAST
    # Nobody reconciles (so nobody dispatches) until past cooldown + expiration.
    advance(registered[2], 65)
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "failed"
    action.refresh_from_db()
    assert action.error.startswith("expired in the delay module")
    assert action.tx_hash is None and history_statuses(action)[-1] == "failed"


def test_a_replayed_signature_is_refused_on_chain(registered, card, api_client, write_token, user):
    action = proposed(api_client, write_token)
    signed = sign(registered, user, action)
    assert action_submit(action_id=action.pk).status == ActionStatus.BROADCAST
    # The same signed module transaction on another action: the account consumed it.
    replay = Action.objects.create(
        **{
            f.name: getattr(signed, f.name)
            for f in Action._meta.concrete_fields
            if f.name not in ("id", "status", "params")
        },
        status=ActionStatus.SIGNED,
        params={
            k: v
            for k, v in Action.objects.get(pk=action.pk).params.items()
            if "relay" not in k and k != "queue_nonce"
        },
    )
    replay = action_submit(action_id=replay.pk)
    assert replay.status == ActionStatus.FAILED
    assert "already relayed" in replay.error


def test_a_tampered_change_is_refused_and_nothing_is_queued(
    registered, card, api_client, write_token, user
):
    w3 = registered[2]
    action = sign(registered, user, proposed(api_client, write_token, "250"))
    # Swap the signed change for a bigger limit after the signature: the account refuses it.
    bigger = zodiac.exec_from_module_call(
        card.roles_address, 0, zodiac.set_daily_allowance_call(10**30)
    )
    Action.objects.filter(pk=action.pk).update(
        params={**Action.objects.get(pk=action.pk).params, "module_data": "0x" + bigger.hex()}
    )
    action = action_submit(action_id=action.pk)
    assert action.status == ActionStatus.FAILED and "invalid passkey signature" in action.error
    delay = w3.eth.contract(address=card.delay_address, abi=zodiac.abi("Delay"))
    assert delay.functions.queueNonce().call() == 0


def test_an_unreachable_chain_leaves_it_submitted_then_reconciliation_relays_it(
    registered, card, api_client, write_token, user, settings
):
    action = sign(registered, user, proposed(api_client, write_token))
    rpc = card_chain().rpc_url
    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, rpc_url="http://127.0.0.1:9"
    )  # nothing listens: refused at once
    action = action_submit(action_id=action.pk)
    assert action.status == ActionStatus.SUBMITTED and "unavailable" in action.error
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, rpc_url=rpc)
    action_reconcile(action_id=action.pk, actor=Actor.worker())
    action.refresh_from_db()
    assert action.status == ActionStatus.BROADCAST and action.error is None


def test_it_refuses_bad_limits_and_users_without_a_card(api_client, write_token, registered, card):
    for body, message in [
        ({"daily_limit": "0"}, "greater than zero"),
        ({"daily_limit": "1.0000000000000000001"}, "more than 18 decimals"),
        ({"daily_limit": "ten"}, "daily_limit: 'ten' does not match"),
        ({"daily_limit": "5", "card_id": "nope"}, "No Picnic card for this user with id nope"),
        ({}, "daily_limit: 'daily_limit' is a required property"),
    ]:
        response = propose(api_client, write_token, body)
        assert response.status_code == 400 and message in said(response), body
    assert not Action.objects.exists()


def test_the_signing_page_shows_the_new_limit_and_what_is_signed(
    registered, card, client, api_client, write_token, user
):
    action = proposed(api_client, write_token, "75.5")
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/").content.decode()
    assert "75.5 EURe" in page and action.params["challenge"] in page
    assert "delay-module transaction hash" in page
