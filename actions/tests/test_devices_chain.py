"""Several passkeys on the real local stack (both chains): a second device added with one
assertion for every chain, both signing transfers, one removed (its signature refused in plain
words), and recovery with the code: started, cancelled by an owner, started again, executed
after the delay (chain time advanced), the new passkey signing."""

from __future__ import annotations

import json

import pytest
from web3 import Web3

from actions.models import (
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    Action,
    OwnerState,
    Passkey,
)
from actions.services.account_changes import (
    account_change_reconcile,
    account_change_submit,
    change_client,
    owner_change_propose,
    owner_change_sign,
    picnic_accounts,
)
from actions.services.lifecycle import action_submit, actions_reconcile_pending
from actions.services.passkeys import PasskeyError, passkey_register, registration_options
from actions.services.recovery import (
    recovery_code_create,
    recovery_registration_options,
    recovery_settle,
    recovery_start,
)
from actions.services.signing import action_sign
from chain.dev import fund
from chain.passkey_account import SoftwarePasskey
from core.chains import all_chains
from core.testing import wait_until

from .conftest import ORIGIN, usdc_id
from .test_signing import RECIPIENT, sign_json

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.fixture
def two_chains(registered, user):
    """The registered user's account funded on every chain (owner ops run on each)."""
    passkey, account, w3 = registered
    for chain in all_chains():
        fund(Web3(Web3.HTTPProvider(chain.rpc_url)), account.address, Web3.to_wei(1, "ether"))
    return passkey, account, w3


def _new_passkey(user) -> tuple[Passkey, SoftwarePasskey]:
    authenticator = SoftwarePasskey(rp_id="localhost", origin=ORIGIN)
    _, challenge = registration_options(user=user)
    passkey = passkey_register(
        user=user,
        credential_json=json.dumps(authenticator.create(challenge)),
        expected_challenge=challenge,
        account_address=None,
    )
    return passkey, authenticator


def _signed_and_executed(
    change: AccountChange, authenticator: SoftwarePasskey, user
) -> AccountChange:
    credential = json.dumps(authenticator.get_json(bytes.fromhex(change.challenge[2:])))
    change = owner_change_sign(change_id=change.pk, user=user, credential_json=credential)
    assert change.status == AccountChangeStatus.SIGNED
    account_change_submit(change_id=change.pk)

    def executed() -> bool:
        current = AccountChange.objects.get(pk=change.pk)
        if current.status == AccountChangeStatus.SUBMITTED:
            current = account_change_reconcile(change=current)
        return current.status in (AccountChangeStatus.EXECUTED, AccountChangeStatus.FAILED)

    wait_until(executed, timeout=90, interval=0.5)
    change = AccountChange.objects.get(pk=change.pk)
    assert change.status == AccountChangeStatus.EXECUTED, change.error
    return change


def _transfer(api_client, token, user, authenticator: SoftwarePasskey) -> Action:
    response = api_client.post(
        "/api/v1/actions/transfer", token, {"asset_id": usdc_id(), "amount": "0.5", "to": RECIPIENT}
    )
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["action_id"])
    action_sign(action_id=action.pk, user=user, credential_json=sign_json(authenticator, action))
    action_submit(action_id=action.pk)
    wait_until(
        lambda: (
            actions_reconcile_pending() is not None
            and Action.objects.get(pk=action.pk).status in ("executed", "failed")
        ),
        timeout=90,
        interval=0.5,
    )
    return Action.objects.get(pk=action.pk)


def test_a_second_device_is_added_on_every_chain_signs_and_the_removed_one_cannot(
    two_chains, api_client, write_token, user
):
    first_authenticator = two_chains[0]
    first = Passkey.objects.get(user=user, owner_index=0)
    second, second_authenticator = _new_passkey(user)
    assert second.owner_state == OwnerState.PENDING

    add = owner_change_propose(user=user, kind=AccountChangeKind.ADD_OWNER, passkey=second)
    assert len(add.ops) == len(all_chains()) == 2  # one op per chain, one challenge for both
    add = _signed_and_executed(add, first_authenticator, user)
    second.refresh_from_db()
    assert (second.owner_state, second.owner_index) == (OwnerState.ACTIVE, 1)
    assert list(add.history.values_list("status", flat=True)) == [
        "proposed",
        "signed",
        "submitted",
        "executed",
    ]

    assert _transfer(api_client, write_token, user, second_authenticator).status == "executed"
    assert _transfer(api_client, write_token, user, first_authenticator).status == "executed"

    remove = owner_change_propose(user=user, kind=AccountChangeKind.REMOVE_OWNER, passkey=first)
    _signed_and_executed(remove, second_authenticator, user)
    first.refresh_from_db()
    assert first.owner_state == OwnerState.REMOVED and first.removed_at is not None
    for account in picnic_accounts(user=user):
        assert [o.index for o in change_client(account).owners()] == [1]

    response = api_client.post(
        "/api/v1/actions/transfer",
        write_token,
        {"asset_id": usdc_id(), "amount": "0.5", "to": RECIPIENT},
    )
    action = Action.objects.get(pk=response.json()["action_id"])
    with pytest.raises(PasskeyError) as refused:
        action_sign(
            action_id=action.pk, user=user, credential_json=sign_json(first_authenticator, action)
        )
    assert refused.value.code == "passkey_removed"
    assert "was removed from your account on" in str(refused.value)
    assert Action.objects.get(pk=action.pk).status == "proposed"  # nothing was signed
    action_sign(
        action_id=action.pk, user=user, credential_json=sign_json(second_authenticator, action)
    )
    action_submit(action_id=action.pk)
    wait_until(
        lambda: (
            actions_reconcile_pending() is not None
            and Action.objects.get(pk=action.pk).status in ("executed", "failed")
        ),
        timeout=90,
        interval=0.5,
    )
    assert Action.objects.get(pk=action.pk).status == "executed"


def _advance(seconds: int) -> None:
    for chain in all_chains():
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
        w3.provider.make_request("evm_increaseTime", [seconds])
        w3.provider.make_request("evm_mine", [])


def _recover(user, code: str) -> tuple[AccountChange, SoftwarePasskey]:
    authenticator = SoftwarePasskey(rp_id="localhost", origin=ORIGIN)
    options, challenge = recovery_registration_options(username=user.username)
    change = recovery_start(
        username=user.username,
        code=code,
        credential=authenticator.create(challenge),
        expected_challenge=challenge,
        address="192.0.2.10",
        user_agent="a new phone",
    )
    return change, authenticator


def test_recovery_started_cancelled_started_again_and_executed_after_the_delay(
    two_chains,
    api_client,
    write_token,
    user,
    settings,
    mailoutbox,
    django_capture_on_commit_callbacks,
):
    from django.core.cache import cache  # noqa: PLC0415

    cache.clear()
    settings.RECOVERY_DELAY_SECONDS = 60
    user.email = "alice@example.com"
    user.save()
    first_authenticator = two_chains[0]
    code, setup = recovery_code_create(user=user)
    _signed_and_executed(setup, first_authenticator, user)

    with django_capture_on_commit_callbacks(execute=True):  # the e-mail leaves after commit
        recovery, _ = _recover(user, code)
    assert recovery.status == AccountChangeStatus.WAITING and recovery.ready_at is not None
    assert recovery.passkey.owner_state == OwnerState.PENDING

    cancel = owner_change_propose(
        user=user, kind=AccountChangeKind.CANCEL_RECOVERY, target=recovery
    )
    _signed_and_executed(cancel, first_authenticator, user)
    recovery.refresh_from_db()
    assert recovery.status == AccountChangeStatus.CANCELLED
    assert Passkey.objects.get(pk=recovery.passkey_id).owner_state == OwnerState.REMOVED

    with django_capture_on_commit_callbacks(execute=True):
        again, new_authenticator = _recover(user, code)
    assert again.status == AccountChangeStatus.WAITING
    assert recovery_settle(change=again).status == AccountChangeStatus.WAITING  # not yet
    _advance(120)
    with django_capture_on_commit_callbacks(execute=True):
        again = recovery_settle(change=AccountChange.objects.get(pk=again.pk))
    assert again.status == AccountChangeStatus.EXECUTED
    new = Passkey.objects.get(pk=again.passkey_id)
    assert new.owner_state == OwnerState.ACTIVE and new.owner_index is not None
    assert _transfer(api_client, write_token, user, new_authenticator).status == "executed"
    subjects = [m.subject for m in mailoutbox]
    assert subjects.count("Picnic: someone started recovering your account") == 2
    assert subjects.count("Picnic: your account was recovered") == 1
