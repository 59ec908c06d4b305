"""card_freeze / card_unfreeze: SIWE signed by the passkey for the card's Safe (EIP-1271,
verified on chain by a local server speaking the Gnosis Pay API), then freeze/unfreeze."""

from __future__ import annotations

import json

import pytest

from actions.execution.models import Action
from actions.execution.services import action_reconcile, action_submit
from actions.execution.signing import action_sign
from core.lifecycle import Actor
from dev.demo.actions import provision_card

pytestmark = [pytest.mark.chain, pytest.mark.django_db]
CARD = "card-0001"


@pytest.fixture
def card(registered, user):
    return provision_card(user=user, card_id=CARD, last4="4242")


def propose(api_client, token, verb: str = "card_freeze") -> Action:
    response = api_client.post(f"/api/v1/actions/{verb}", token, {})
    assert response.status_code == 201, response.content
    return Action.objects.get(pk=response.json()["action_id"])


def sign(registered, user, action: Action) -> Action:
    passkey = registered[0]
    challenge = bytes.fromhex(action.params["challenge"][2:])
    return action_sign(
        action_id=action.pk, user=user, credential_json=json.dumps(passkey.get_json(challenge))
    )


def test_freeze_then_unfreeze_through_siwe_and_eip1271(
    registered, card, gnosis_pay, api_client, write_token, user
):
    action = propose(api_client, write_token)
    assert action.type == "cardFreeze" and action.user_op_hash is None
    assert action.summary == "Freeze your Picnic card •••• 4242"
    message = action.params["siwe_message"]
    assert message.splitlines()[1] == card.safe_address
    assert (
        "wants you to sign in with your Ethereum account:" in message
        and "Chain ID: 31337" in message
    )
    sign(registered, user, action)
    action = action_submit(action_id=action.pk)
    assert action.status == "executed", action.error
    assert gnosis_pay.cards[CARD] == {"safe": card.safe_address, "frozen": True}
    assert [h.status for h in action.history.order_by("timestamp", "id")] == [
        "proposed",
        "signed",
        "submitted",
        "executed",
    ]
    assert action.history.last().payload["isFrozen"] is True
    # The sign-in's JWT is kept for the Safe, so get_transactions can read card purchases.
    from actions.card.selectors import gnosis_pay_session_token

    token = gnosis_pay_session_token(safe_address=card.safe_address)
    assert gnosis_pay._subject_of(token) == card.safe_address

    unfreeze = propose(api_client, write_token, "card_unfreeze")
    sign(registered, user, unfreeze)
    assert action_submit(action_id=unfreeze.pk).status == "executed"
    assert gnosis_pay.cards[CARD]["frozen"] is False


def test_a_card_already_frozen_answers_409_and_still_ends_executed(
    registered, card, gnosis_pay, api_client, write_token, user
):
    gnosis_pay.cards[CARD] = {"safe": card.safe_address, "frozen": True}
    action = propose(api_client, write_token)
    sign(registered, user, action)
    assert action_submit(action_id=action.pk).status == "executed"
    assert ("POST", f"/api/v1/cards/{CARD}/freeze") in gnosis_pay.calls


def test_a_signature_gnosis_pay_refuses_fails_the_action(
    registered, card, gnosis_pay, api_client, write_token, user
):
    action = sign(registered, user, propose(api_client, write_token))
    signature = action.params["siwe_signature"]
    at = 2 + 2 * (65 + 32) + 10  # inside the passkey signature's r
    tampered = signature[:at] + ("0" if signature[at] != "0" else "1") + signature[at + 1 :]
    Action.objects.filter(pk=action.pk).update(params={**action.params, "siwe_signature": tampered})
    action = action_submit(action_id=action.pk)
    assert action.status == "failed"
    assert action.error.startswith("Gnosis Pay refused the sign-in: Gnosis Pay HTTP 401")
    assert CARD not in gnosis_pay.cards


@pytest.mark.parametrize(
    ("mode", "error"), [("error", "HTTP 503"), ("hang", "no answer within 1s")]
)
def test_gnosis_pay_down_leaves_it_submitted_until_reconciled(
    registered, card, gnosis_pay, api_client, write_token, user, mode, error
):
    action = sign(registered, user, propose(api_client, write_token))
    gnosis_pay.mode = mode
    action = action_submit(action_id=action.pk)
    assert action.status == "submitted" and error in action.error
    gnosis_pay.mode = "ok"
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "executed"
    action.refresh_from_db()
    assert (action.status, action.error) == ("executed", None)
    assert gnosis_pay.cards[CARD]["frozen"] is True


def test_an_expired_token_on_the_card_call_fails_clearly(
    registered, card, gnosis_pay, api_client, write_token, user
):
    action = sign(registered, user, propose(api_client, write_token))
    gnosis_pay.mode = "expired"
    action = action_submit(action_id=action.pk)
    assert action.status == "failed" and "HTTP 401" in action.error


def test_a_replayed_siwe_nonce_is_refused_by_gnosis_pay(
    registered, card, gnosis_pay, api_client, write_token, user
):
    first = sign(registered, user, propose(api_client, write_token))
    assert action_submit(action_id=first.pk).status == "executed"
    from actions.providers.gnosis_pay import GnosisPayClient, Unauthorized

    with pytest.raises(Unauthorized, match="already used nonce"):
        GnosisPayClient(gnosis_pay.url, timeout=1).challenge(
            message=first.params["siwe_message"], signature=first.params["siwe_signature"]
        )


def test_card_tools_need_a_card(registered, gnosis_pay, api_client, write_token):
    response = api_client.post("/api/v1/actions/card_freeze", write_token, {})
    assert (
        response.status_code == 400 and response.json()["detail"] == "No Picnic card for this user"
    )


def test_the_sign_page_shows_the_siwe_message_being_signed(
    registered, card, gnosis_pay, client, api_client, write_token, user
):
    action = propose(api_client, write_token)
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/").text
    assert "Freeze your Picnic card •••• 4242" in page
    assert card.safe_address in page and "Nonce: " in page and "(userOpHash)" not in page
