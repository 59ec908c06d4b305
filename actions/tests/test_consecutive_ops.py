"""Many user operations from one passkey account, through the tools, the real bundler and chain.

The first operation of an account carries its deployment, whose gas hid a verification budget
that was too small for every later one (AA26). These tests sign one op after another from the
same account, transfers and swaps mixed, on both EntryPoint versions."""

from __future__ import annotations

import pytest

from actions.execution.models import Action, ActionStatus
from actions.tests.factories import passkey_signs
from chain.dev import token_balance

from .conftest import usdc_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db]
RECIPIENT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"


def _post(api_client, token, path: str, payload: dict) -> Action:
    response = api_client.post(f"/api/v1/actions/{path}", token, payload)
    assert response.status_code == 201, response.content
    return Action.objects.get(pk=response.json()["action_id"])


def _eure_id() -> str:
    from chain import contracts

    return f"eip155:31337/erc20:{contracts.demo_token_address('EURe')}"


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_ten_consecutive_operations_from_one_passkey_account_all_execute(
    webauthn_settings, make_user_registered, quotes, api_client, application, make_token, version
):
    webauthn_settings.ENTRY_POINT_VERSION = version
    user, passkey, account, w3 = make_user_registered(f"many-{version}")
    token = make_token(user, application, scope="read:actions write:actions")
    before = token_balance(w3, "USDC", RECIPIENT)
    sent = 0
    for i in range(10):
        if i % 3 == 2:
            action = _post(
                api_client,
                token,
                "swap",
                {"from_asset_id": usdc_id(), "to_asset_id": _eure_id(), "amount": "0.2"},
            )
        else:
            action = _post(
                api_client,
                token,
                "transfer",
                {"asset_id": usdc_id(), "amount": "0.1", "to": RECIPIENT},
            )
            sent += 100_000
        assert action.user_op["nonce"] == i and action.entry_point_version == version
        settled = passkey_signs(passkey, user, action.pk)
        assert settled.status == ActionStatus.EXECUTED, (i, settled.status, settled.error)
    assert token_balance(w3, "USDC", RECIPIENT) - before == sent

    # An over-balance transfer from the now-deployed account ends failed with the reason.
    action = _post(
        api_client, token, "transfer", {"asset_id": usdc_id(), "amount": "1000", "to": RECIPIENT}
    )
    settled = passkey_signs(passkey, user, action.pk)
    assert settled.status == ActionStatus.FAILED, settled.error
    assert settled.error.startswith("ERC20InsufficientBalance("), settled.error
