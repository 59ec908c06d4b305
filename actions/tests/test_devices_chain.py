"""Several passkeys on the real local stack (both chains): a second device approved through its
pages with one assertion for every chain, both signing transfers, one removed (its signature
refused in plain words), and recovery with the code: started, cancelled by an owner, started
again, executed after the delay (chain time advanced), the new passkey signing. The page flow
and a recovery run on EntryPoint v0.8 as well. A change a really stopped chain missed is
applied there once that chain is back."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse
from web3 import Web3
from webauthn.helpers import base64url_to_bytes

from actions.accounts.change_delivery import account_change_reconcile, account_change_submit
from actions.accounts.models import (
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    OwnerState,
    Passkey,
    Preferences,
)
from actions.accounts.owner_changes import (
    change_client,
    owner_change_propose,
    owner_change_sign,
    passkey_key,
    picnic_accounts,
)
from actions.accounts.passkeys import PasskeyError
from actions.accounts.recovery import (
    account_changes_process,
    recovery_code_create,
    recovery_settle,
    recovery_user_handle,
)
from actions.accounts.selectors import account_changes_stuck
from actions.evm_clients import bundler_client
from actions.execution.models import Action
from actions.execution.services import action_submit, actions_reconcile_pending
from actions.execution.signing import action_sign
from chain.dev import fund
from chain.passkey_account import SoftwarePasskey
from core.chains import all_chains, get_chain
from dev.testing import wait_until
from evm.userops import entry_point_address, to_rpc, user_op_hash

from .conftest import ORIGIN, usdc_id
from .test_devices import _register
from .test_signing import RECIPIENT, sign_json

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.fixture
def entry_point_version(request, webauthn_settings) -> str:
    """The EntryPoint the account is registered on (0.7 unless a test asks for another)."""
    webauthn_settings.ENTRY_POINT_VERSION = getattr(request, "param", "0.7")
    return webauthn_settings.ENTRY_POINT_VERSION


@pytest.fixture
def two_chains(entry_point_version, registered, user):
    """The registered user's account funded on every chain (owner ops run on each)."""
    passkey, account, w3 = registered
    for chain in all_chains():
        fund(Web3(Web3.HTTPProvider(chain.rpc_url)), account.address, Web3.to_wei(1, "ether"))
    return passkey, account, w3


def _signed(change: AccountChange, authenticator: SoftwarePasskey, user) -> AccountChange:
    credential = json.dumps(authenticator.get_json(bytes.fromhex(change.challenge[2:])))
    change = owner_change_sign(change_id=change.pk, user=user, credential_json=credential)
    assert change.status == AccountChangeStatus.SIGNED
    return change


def _signed_and_executed(
    change: AccountChange, authenticator: SoftwarePasskey, user
) -> AccountChange:
    return _executed(_signed(change, authenticator, user))


def _executed(change: AccountChange) -> AccountChange:
    """Submitted to every chain's bundler, then reconciled (as beat does) until it ends."""
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
    return _settled(action)


def _settled(action: Action) -> Action:
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


def _approved_on_pages(client, user, pending: Passkey, authenticator) -> AccountChange:
    """The Django flow of approving a device, page by page: "Approve this device" builds the
    change, the page asks for its WebAuthn options, the assertion is posted; then the
    worker's steps until every chain has it."""
    client.force_login(user)
    approve = client.post(reverse("device-approve", args=[pending.pk]))
    change = AccountChange.objects.get(user=user, kind=AccountChangeKind.ADD_OWNER)
    assert approve.status_code == 302 and approve.url == reverse("account-change", args=[change.pk])
    assert len(change.ops) == len(all_chains()) == 2  # one op per chain, one challenge for both
    options = client.post(reverse("account-change-options", args=[change.pk])).json()
    assertion = authenticator.get_json(base64url_to_bytes(options["challenge"]))
    signed = client.post(
        reverse("account-change-sign", args=[change.pk]),
        json.dumps(assertion),
        content_type="application/json",
    )
    assert signed.status_code == 200 and signed.json() == {"status": "signed"}
    return _executed(AccountChange.objects.get(pk=change.pk))


def test_a_second_device_is_added_on_every_chain_signs_and_the_removed_one_cannot(
    two_chains, client, api_client, write_token, user
):
    first_authenticator = two_chains[0]
    first = Passkey.objects.get(user=user, owner_index=0)
    second, second_authenticator = _register(user)
    assert second.owner_state == OwnerState.PENDING

    add = _approved_on_pages(client, user, second, first_authenticator)
    second.refresh_from_db()
    assert (second.owner_state, second.owner_index) == (OwnerState.ACTIVE, 1)
    history = list(add.history.order_by("timestamp", "pk").values_list("status", "detail"))
    assert [status for status, _ in history] == [
        "proposed",
        "signed",
        "submitted",
        "submitted",  # a row per chain as each includes its op
        "submitted",
        "executed",
    ]
    assert sorted(detail.split(" (")[0] for _, detail in history[3:5]) == [
        "chain 31337: included",
        "chain 31338: included",
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
    assert _settled(action).status == "executed"


# v0.7: the test above approves its device through the same pages.
@pytest.mark.parametrize("entry_point_version", ["0.8"], indirect=True)
def test_a_device_approved_on_its_page_is_an_owner_on_every_chain(
    entry_point_version, two_chains, client, user, mailoutbox, django_capture_on_commit_callbacks
):
    """The page flow on the other EntryPoint; the user hears of it by e-mail in their own
    language and time zone."""
    user.email = "alice@example.com"
    user.save()
    Preferences.objects.create(user=user, language="pt-br", time_zone="America/Sao_Paulo")
    second, _ = _register(user)

    with django_capture_on_commit_callbacks(execute=True):  # the e-mail leaves after commit
        change = _approved_on_pages(client, user, second, two_chains[0])
    assert {op["version"] for op in change.ops} == {entry_point_version}
    second.refresh_from_db()
    assert (second.owner_state, second.owner_index) == (OwnerState.ACTIVE, 1)
    for account in picnic_accounts(user=user):
        assert account.entry_point_version == entry_point_version
        assert [o.index for o in change_client(account).owners()] == [0, 1]
    (mail,) = mailoutbox
    assert mail.subject == "Picnic: um dispositivo foi adicionado à sua conta"
    assert " BRT" in mail.body and "America/Sao_Paulo" not in mail.body


def _advance(seconds: int) -> None:
    for chain in all_chains():
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
        w3.provider.make_request("evm_increaseTime", [seconds])
        w3.provider.make_request("evm_mine", [])


def _recover(user, code: str) -> tuple[AccountChange, SoftwarePasskey]:
    """Through the recovery pages, as a new device does: the options (an opaque user handle,
    not the user's id), a new passkey over their challenge, the code."""
    authenticator = SoftwarePasskey(rp_id="localhost", origin=ORIGIN)
    device = Client(REMOTE_ADDR="192.0.2.10", HTTP_USER_AGENT="a new phone")
    options = device.post(
        reverse("recover-options"), {"username": user.username}, content_type="application/json"
    ).json()
    assert base64url_to_bytes(options["user"]["id"]) == recovery_user_handle(username=user.username)
    credential = authenticator.create(base64url_to_bytes(options["challenge"]))
    verified = device.post(
        reverse("recover-verify"),
        {"code": code, "credential": credential},
        content_type="application/json",
    )
    assert verified.status_code == 200, verified.content
    change = AccountChange.objects.filter(user=user, kind=AccountChangeKind.RECOVERY).latest(
        "created_at"
    )
    return change, authenticator


@pytest.mark.parametrize("entry_point_version", ["0.7", "0.8"], indirect=True)
def test_recovery_started_cancelled_started_again_and_executed_after_the_delay(
    entry_point_version,
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

    # The cancellation is one more owner op, which the device test runs on both versions:
    # here it runs once (v0.7), and v0.8 goes from the proposal straight to its execution.
    started = 1
    if entry_point_version == "0.7":
        with django_capture_on_commit_callbacks(execute=True):  # the e-mail leaves on commit
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
        started = 2

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
    assert subjects.count("Picnic: someone started recovering your account") == started
    assert subjects.count("Picnic: your account was recovered") == 1


def test_a_recovery_passkey_cannot_be_approved_early_and_executes_only_after_its_ready_time(
    two_chains, client, staff_user, user, settings
):
    """The bypass a review found: the recovery's passkey approved as a linked device. Refused
    (409, the error shape), every chain's owners unchanged. Even with the key added on chain
    by an op of the test's own before the delay, nothing is recorded as executed (nor shown
    so on the staff timeline) until chain time passes readyAt on every chain."""
    from django.core.cache import cache  # noqa: PLC0415

    cache.clear()
    settings.RECOVERY_DELAY_SECONDS = 3600
    # The second chain's clock runs 10 minutes ahead, as other tests leave it: each chain's
    # ready time is its own, and the recovery still executes once both have reached theirs.
    second = all_chains()[-1]
    Web3(Web3.HTTPProvider(second.rpc_url)).provider.make_request("evm_increaseTime", [600])
    Web3(Web3.HTTPProvider(second.rpc_url)).provider.make_request("evm_mine", [])
    first_authenticator = two_chains[0]
    code, setup = recovery_code_create(user=user)
    _signed_and_executed(setup, first_authenticator, user)
    recovery, _ = _recover(user, code)
    assert recovery.status == AccountChangeStatus.WAITING
    pending = recovery.passkey

    client.force_login(user)
    answer = client.post(reverse("device-approve", args=[pending.pk]))
    assert answer.status_code == 409, answer.content
    assert answer.json()["code"] == "recovery_passkey" and answer.json()["errors"] == {}
    assert not AccountChange.objects.filter(user=user, kind=AccountChangeKind.ADD_OWNER).exists()
    with pytest.raises(PasskeyError):
        owner_change_propose(user=user, kind=AccountChangeKind.ADD_OWNER, passkey=pending)
    for account in picnic_accounts(user=user):
        assert [o.index for o in change_client(account).owners()] == [0]
    assert Passkey.objects.get(pk=pending.pk).owner_state == OwnerState.PENDING

    # An owner op outside the server adds the key early: the recovery still waits.
    for account in picnic_accounts(user=user):
        _added_directly(user, pending, first_authenticator, chain_id=account.chain_id)
    assert recovery_settle(change=recovery).status == AccountChangeStatus.WAITING
    recovery.refresh_from_db()
    assert recovery.executed_at is None
    assert "executed" not in recovery.history.values_list("status", flat=True)
    staff_user.is_superuser = True
    staff_user.save()
    client.force_login(staff_user)
    timeline = client.get(
        reverse("actions-staff:account-change-timeline", args=[recovery.pk])
    ).content.decode()
    assert 'data-status="waiting"' in timeline and "executeRecovery" not in timeline

    _advance(3700)
    recovery = recovery_settle(change=AccountChange.objects.get(pk=recovery.pk))
    assert recovery.status == AccountChangeStatus.EXECUTED
    # Each chain against its own readyAt (recorded while it waited): chain clocks differ.
    ready_by_chain = recovery.params["ready_at_by_chain"]
    assert set(ready_by_chain) == {str(a.chain_id) for a in picnic_accounts(user=user)}
    for account in picnic_accounts(user=user):
        chain_now = Web3(Web3.HTTPProvider(get_chain(account.chain_id).rpc_url)).eth.get_block(
            "latest"
        )
        assert chain_now["timestamp"] >= ready_by_chain[str(account.chain_id)]


def test_a_change_a_stopped_chain_missed_is_applied_there_once_it_is_back(registered, user, own_l2):
    """A second chain of our own, its node and bundler really stopped between signing and
    submitting: the card chain applies the change, the other is retried with backoff (the
    change stays submitted, stuck for staff, history per chain), and once the chain is back
    (restarted on the same ports) its op is re-sent and the change ends executed, once."""
    passkey_authenticator = registered[0]
    l2 = own_l2
    try:
        for chain in all_chains():
            fund(Web3(Web3.HTTPProvider(chain.rpc_url)), registered[1].address, 10**18)
        second, _ = _register(user)
        change = owner_change_propose(user=user, kind=AccountChangeKind.ADD_OWNER, passkey=second)
        change = _signed(change, passkey_authenticator, user)
        l2.stop()  # nothing listens on the L2's node and bundler ports any more

        account_change_submit(change_id=change.pk)

        def card_chain_has_it() -> bool:
            current = account_change_reconcile(change=AccountChange.objects.get(pk=change.pk))
            return current.ops[0]["done"]

        wait_until(card_chain_has_it, timeout=60, interval=0.5)
        change = AccountChange.objects.get(pk=change.pk)
        card, other = change.ops
        assert change.status == AccountChangeStatus.SUBMITTED and change.behind_since
        assert (card["chain_id"], other["chain_id"]) == (31337, 31338)
        assert not other["done"] and other["attempts"] >= 1 and other["retry_at"]
        assert change in account_changes_stuck()
        assert Passkey.objects.get(pk=second.pk).owner_state == OwnerState.PENDING
        details = list(change.history.values_list("detail", flat=True))
        assert any(d.startswith("chain 31338 unreachable, retrying") for d in details)
        assert any(d.startswith("chain 31337: included (tx 0x") for d in details)

        l2.start()  # back, on the same ports (a fresh node: the account is not deployed yet
        # there, as before: its op carries the initCode)
        fund(Web3(Web3.HTTPProvider(l2.rpc_url)), registered[1].address, 10**18)
        # Meanwhile the owner reaches that chain by another op (another nonce key): the
        # worker's re-sent op is refused there, and the chain, read, already has the change.
        _added_directly(user, second, passkey_authenticator, chain_id=31338)

        def executed() -> bool:
            account_changes_process()  # beat's sweep: the L2 op is re-sent once its delay passed
            return AccountChange.objects.get(pk=change.pk).status in ("executed", "failed")

        wait_until(executed, timeout=120, interval=1)
        change = AccountChange.objects.get(pk=change.pk)
        assert change.status == AccountChangeStatus.EXECUTED, change.error
        assert change.behind_since is None and change not in account_changes_stuck()
        second.refresh_from_db()
        assert (second.owner_state, second.owner_index) == (OwnerState.ACTIVE, 1)
        for account in picnic_accounts(user=user):
            assert [o.index for o in change_client(account).owners()] == [0, 1]
        details = list(change.history.values_list("detail", flat=True))
        assert any(
            d.startswith("chain 31338: included after ") and d.endswith("(already had the change)")
            for d in details
        )
        statuses = list(change.history.values_list("status", flat=True))
        assert statuses.count("executed") == 1
        # The sweep again: nothing more happens to it (no second owner, no second row).
        rows = change.history.count()
        account_changes_process()
        assert change.history.count() == rows
        assert AccountChange.objects.get(pk=change.pk).status == AccountChangeStatus.EXECUTED
    finally:
        l2.stop()


def _added_directly(user, passkey: Passkey, authenticator, *, chain_id: int) -> None:
    """`passkey` added as an owner on one chain by an op of the test's own (nonce key 2),
    outside the account change."""
    account = next(a for a in picnic_accounts(user=user) if a.chain_id == chain_id)
    client = change_client(account)
    bundler = bundler_client(chain_id)
    op = client.build(client.add_owner_call(*passkey_key(passkey)), bundler, nonce_key=2)
    op_hash = user_op_hash(
        op,
        entry_point=entry_point_address(account.entry_point_version),
        chain_id=chain_id,
        version=account.entry_point_version,
    )
    op = client.sign_with(authenticator, op, op_hash)
    bundler.send_user_operation(to_rpc(op), entry_point_address(account.entry_point_version))
    receipt = wait_until(
        lambda: bundler.get_user_operation_receipt(op_hash), timeout=60, interval=0.3
    )
    assert receipt.success
