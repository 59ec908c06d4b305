"""An assertion body that cannot be parsed is a refused signature (409 on the page), whatever
is wrong with it; the action stays `proposed`. No chain: nothing is sent."""

from __future__ import annotations

import json

import pytest

from actions.accounts.models import Passkey, SmartAccount
from actions.accounts.passkeys import PasskeyError
from actions.execution.models import Action, ActionStatus
from actions.execution.signing import action_sign
from actions.tests.factories import SENDER, make_action

pytestmark = pytest.mark.django_db

CREDENTIAL = {
    "id": "cred-1",
    "rawId": "cred-1",
    "type": "public-key",
    "response": {"clientDataJSON": "e30", "authenticatorData": "AA", "signature": "AA"},
}


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[]",
        json.dumps({**CREDENTIAL, "rawId": 7}),
        json.dumps({**CREDENTIAL, "rawId": "é%%"}),  # not base64url
        json.dumps({**CREDENTIAL, "type": "password"}),
    ],
)
def test_an_unreadable_assertion_is_refused_and_changes_nothing(user, application, body):
    passkey = Passkey.objects.create(
        user=user, credential_id="cred-1", public_key=b"\x00", public_key_x="0x", public_key_y="0x"
    )
    SmartAccount.objects.create(
        user=user,
        kind="picnic",
        chain_id=31337,
        address=SENDER,
        owner="passkey:cred-1",
        passkey=passkey,
        entry_point_version="0.7",
    )
    action = make_action(user=user, application=application)
    with pytest.raises(PasskeyError, match="the assertion could not be read"):
        action_sign(action_id=action.pk, user=user, credential_json=body)
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PROPOSED
