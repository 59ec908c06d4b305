"""Passkey registration, the transfer tool and signing, with a software authenticator.

The browser path (Chromium's virtual authenticator) is in test_signing_browser.py."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from actions.accounts.models import Passkey
from actions.accounts.pages import _account_address
from actions.accounts.passkeys import PasskeyError, passkey_register, registration_options
from actions.execution.models import Action, ActionStatus
from actions.execution.services import action_submit, actions_reconcile_pending
from actions.execution.signing import action_sign
from actions.tests.factories import said
from chain.dev import token_balance
from chain.passkey_account import SoftwarePasskey
from dev.testing import wait_until

from .conftest import ORIGIN, usdc_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db]
RECIPIENT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"


def transfer(api_client, token, **body) -> dict:
    payload = {"asset_id": usdc_id(), "amount": "1.5", "to": RECIPIENT, **body}
    return api_client.post("/api/v1/actions/transfer", token, payload)


def sign_json(passkey: SoftwarePasskey, action: Action, **kwargs) -> str:
    return json.dumps(passkey.get_json(bytes.fromhex(action.user_op_hash[2:]), **kwargs))


def test_registration_stores_the_credential_and_a_counterfactual_account(registered, user):
    passkey, account, w3 = registered
    stored = Passkey.objects.get(user=user)
    assert stored.public_key_x == "0x" + passkey.public_xy[0].hex()
    assert account.owner == f"passkey:{stored.credential_id}" and account.kind == "picnic"
    assert w3.eth.get_code(account.address) == b""  # deployed by the first user operation


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"user_verified": False}, "User verification is required"),
        ({"origin": "http://evil.test"}, "origin"),
    ],
)
def test_registration_refuses_bad_responses(webauthn_settings, user, change, message):
    origin = change.pop("origin", ORIGIN)
    passkey = SoftwarePasskey(rp_id="localhost", origin=origin, **change)
    _, challenge = registration_options(user=user)
    with pytest.raises(PasskeyError, match=message):
        passkey_register(
            user=user,
            credential_json=json.dumps(passkey.create(challenge)),
            expected_challenge=challenge,
            account_address=_account_address,
        )
    assert not Passkey.objects.exists()


def test_transfer_sign_submit_execute_on_chain(
    registered, api_client, write_token, user, django_capture_on_commit_callbacks
):
    passkey, account, w3 = registered
    response = transfer(api_client, write_token)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["summary"] == f"Send 1.5 USDC to {RECIPIENT} on Gnosis (local)"
    assert body["sign_url"] == f"{ORIGIN}/sign/{body['action_id']}/"
    assert body["resource_uri"] == f"picnic://action/{body['action_id']}"
    action = Action.objects.get(pk=body["action_id"])
    assert action.status == "proposed" and action.user_op["factory"]  # first op deploys the account
    before = token_balance(w3, "USDC", RECIPIENT)
    with django_capture_on_commit_callbacks() as callbacks:
        action = action_sign(
            action_id=action.pk, user=user, credential_json=sign_json(passkey, action)
        )
    assert action.status == ActionStatus.SIGNED
    # The submit task is enqueued once, after commit (beside the event and the metrics count).
    assert sum("enqueue_on_commit" in c.__qualname__ for c in callbacks) == 1
    action_submit(action_id=action.pk)  # what the enqueued task does
    wait_until(
        lambda: (
            actions_reconcile_pending() and Action.objects.get(pk=action.pk).status == "executed"
        ),
        timeout=60,
        interval=0.5,
    )
    assert token_balance(w3, "USDC", RECIPIENT) - before == 1_500_000
    assert Passkey.objects.get(user=user).sign_count == passkey.sign_count


def test_a_replayed_assertion_is_refused_and_changes_nothing(
    registered, api_client, write_token, user
):
    passkey, _account, _w3 = registered
    action = Action.objects.get(pk=transfer(api_client, write_token).json()["action_id"])
    assertion = sign_json(passkey, action)
    action_sign(action_id=action.pk, user=user, credential_json=assertion)
    with pytest.raises(PasskeyError, match="can no longer be signed: it is signed"):
        action_sign(action_id=action.pk, user=user, credential_json=assertion)
    assert Action.objects.get(pk=action.pk).history.filter(status="signed").count() == 1


def test_an_assertion_for_another_action_or_origin_is_refused(
    registered, api_client, write_token, user
):
    passkey, _account, _w3 = registered
    first = Action.objects.get(pk=transfer(api_client, write_token).json()["action_id"])
    second = Action.objects.get(
        pk=transfer(api_client, write_token, amount="2").json()["action_id"]
    )
    with pytest.raises(PasskeyError, match="Signature refused"):
        action_sign(action_id=second.pk, user=user, credential_json=sign_json(passkey, first))
    with pytest.raises(PasskeyError, match="Signature refused"):
        action_sign(
            action_id=first.pk,
            user=user,
            credential_json=sign_json(passkey, first, origin="http://evil.test"),
        )
    tampered = json.loads(sign_json(passkey, first))
    tampered["response"]["signature"] = tampered["response"]["signature"][:-4] + "AAAA"
    with pytest.raises(PasskeyError, match="Signature refused"):
        action_sign(action_id=first.pk, user=user, credential_json=json.dumps(tampered))
    assert set(Action.objects.values_list("status", flat=True)) == {"proposed"}


def test_a_sign_count_that_goes_backwards_is_refused(registered, api_client, write_token, user):
    passkey, _account, _w3 = registered
    action = Action.objects.get(pk=transfer(api_client, write_token).json()["action_id"])
    Passkey.objects.filter(user=user).update(sign_count=passkey.sign_count + 10)
    with pytest.raises(PasskeyError, match="sign count"):
        action_sign(action_id=action.pk, user=user, credential_json=sign_json(passkey, action))


def test_a_late_assertion_is_refused_and_the_action_expires(
    registered, api_client, write_token, user
):
    passkey, _account, _w3 = registered
    action = Action.objects.get(pk=transfer(api_client, write_token).json()["action_id"])
    Action.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(PasskeyError, match="it is expired"):
        action_sign(action_id=action.pk, user=user, credential_json=sign_json(passkey, action))
    assert Action.objects.get(pk=action.pk).status == "expired"


def test_the_sign_page_is_for_the_owner_only(
    registered, client, api_client, write_token, other_user
):
    action_id = transfer(api_client, write_token).json()["action_id"]
    client.force_login(other_user)
    page = client.get(f"/sign/{action_id}/")
    assert page.status_code == 403
    assert (
        "not for your account" in page.text
        and "USDC" not in page.text
        and action_id not in page.text
    )
    assert (
        client.post(f"/sign/{action_id}/approve", "{}", content_type="application/json").status_code
        == 403
    )
    client.logout()
    assert client.get(f"/sign/{action_id}/").status_code == 302  # to the login page


def test_the_sign_page_shows_what_is_signed_with_a_strict_csp(
    registered, client, api_client, write_token, user
):
    action_id = transfer(api_client, write_token).json()["action_id"]
    client.force_login(user)
    page = client.get(f"/sign/{action_id}/")
    assert page.status_code == 200
    # In plain words: the short form in the headline, the full checksummed address below.
    assert f"Send 1.5 USDC to {RECIPIENT[:6]}…{RECIPIENT[-4:]}" in page.text
    assert f'<code class="address" id="recipient-address">{RECIPIENT}</code>' in page.text
    assert "Gnosis (local)" in page.text and ">31337<" in page.text
    assert "Time left to sign" in page.text and 'id="approve"' in page.text
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert "<script>" not in page.text  # no inline script


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"asset_id": "eip155:31337/erc20:0x" + "12" * 20},
            "Unknown token: eip155:31337/erc20:0x" + "12" * 20,  # never "<internal>/erc20:…"
        ),
        ({"asset_id": "USDC"}, "CAIP-19"),
        ({"amount": "0"}, "greater than zero"),
        ({"amount": "-1"}, "amount: '-1' does not match"),
        ({"amount": "1.0000001"}, "more than 6 decimals"),
        ({"amount": "lots"}, "amount: 'lots' does not match"),
        ({"to": "0x90f79bf6eb2c4f870365e785982e1f101e93B906"}, "invalid EIP-55 checksum"),
        ({"to": "vitalik.eth"}, "The ENS name vitalik.eth was not found on Gnosis (local)"),
        ({"to": "not an address"}, "0x address or an ENS name"),
    ],
)
def test_transfer_rejects_bad_input_clearly(registered, api_client, write_token, body, message):
    response = transfer(api_client, write_token, **body)
    assert response.status_code == 400
    assert message in said(response)
    assert not Action.objects.exists()


def test_transfer_needs_a_passkey_account_and_the_scope(
    webauthn_settings, api_client, user, application, make_token
):
    response = transfer(
        api_client, make_token(user, application, scope="read:actions write:actions")
    )
    assert response.status_code == 400 and "register a passkey first" in response.json()["detail"]
    assert (
        transfer(api_client, make_token(user, application, scope="read:actions")).status_code == 403
    )


def test_a_transfer_beyond_the_balance_reverts_on_chain_and_fails_with_the_reason(
    registered, api_client, write_token, user
):
    passkey, _account, _w3 = registered
    body = transfer(api_client, write_token, amount="1000").json()
    action = Action.objects.get(pk=body["action_id"])
    assert "simulation_error" in action.params  # the signing page warns
    action_sign(action_id=action.pk, user=user, credential_json=sign_json(passkey, action))
    action = action_submit(action_id=action.pk)
    assert action.status == "broadcast", action.error
    wait_until(
        lambda: actions_reconcile_pending() and Action.objects.get(pk=action.pk).status == "failed",
        timeout=60,
        interval=0.5,
    )
    action.refresh_from_db()
    # ERC20InsufficientBalance(sender, balance, needed): 10 USDC held, 1000 asked.
    assert (
        action.error
        == f"ERC20InsufficientBalance({action.smart_account.lower()}, 10000000, 1000000000)"
    ), action.error
