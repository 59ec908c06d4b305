"""Devices of an account without the chain: "add a device" links (one use, short-lived, the
same user), pending passkeys, the removal race, the recovery page's refusals and throttle,
and account changes as tracked work (lifecycle, history, console, staff read-only)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from webauthn.helpers import base64url_to_bytes

from actions.accounts.devices import DeviceError, coarse_ip, device_link_create, device_link_open
from actions.accounts.models import (
    AccountChange,
    AccountChangeHistory,
    AccountChangeKind,
    AccountChangeStatus,
    DeviceLink,
    OwnerState,
    Passkey,
    RecoverySetup,
    SmartAccount,
)
from actions.accounts.owner_changes import removal_claim
from actions.accounts.passkeys import PasskeyError, passkey_register, registration_options
from actions.accounts.recovery import recovery_user_handle
from actions.execution.models import ActionType
from chain.passkey_account import SoftwarePasskey
from core.lifecycle import Actor, create, lifecycle_named, transition

ORIGIN = "http://localhost:8000"
ACCOUNT = "0x" + "ab" * 20


def _register(user, *, device=None) -> tuple[Passkey, SoftwarePasskey]:
    """A real WebAuthn registration (a software authenticator); the first passkey makes the
    account (a made-up address: no chain here)."""
    authenticator = SoftwarePasskey(rp_id="localhost", origin=ORIGIN)
    _, challenge = registration_options(user=user)
    passkey = passkey_register(
        user=user,
        credential_json=json.dumps(authenticator.create(challenge)),
        expected_challenge=challenge,
        account_address=lambda qx, qy: (ACCOUNT, "0x" + "cd" * 20),
        device=device,
    )
    return passkey, authenticator


def _activate(passkey: Passkey, index: int) -> Passkey:
    Passkey.objects.filter(pk=passkey.pk).update(owner_state=OwnerState.ACTIVE, owner_index=index)
    passkey.refresh_from_db()
    return passkey


# --- pending passkeys ----------------------------------------------------------------------


def test_it_makes_the_first_passkey_owner_0_and_later_ones_pending(webauthn, user):
    first, _ = _register(user)
    second, _ = _register(
        user, device={"user_agent": "Firefox on Linux", "ip_coarse": "1.2.3.0/24"}
    )
    assert (first.owner_state, first.owner_index) == (OwnerState.ACTIVE, 0)
    assert (second.owner_state, second.owner_index) == (OwnerState.PENDING, None)
    assert second.user_agent == "Firefox on Linux" and second.ip_coarse == "1.2.3.0/24"
    assert SmartAccount.objects.filter(user=user, passkey=first).exists()
    assert not SmartAccount.objects.filter(passkey=second).exists()


def test_it_keeps_only_the_network_of_an_address():
    assert coarse_ip("203.0.113.77") == "203.0.113.0/24"
    assert coarse_ip("2001:db8:1234:5678::1") == "2001:db8:1234::/48"
    assert coarse_ip("not an address") == ""


# --- "add a device" links --------------------------------------------------------------------


def test_it_refuses_a_link_without_an_account(user):
    with pytest.raises(DeviceError) as refused:
        device_link_create(user=user)
    assert refused.value.code == "no_account"
    assert not DeviceLink.objects.exists()


def test_it_opens_a_link_once_for_the_same_user(webauthn, user):
    _register(user)
    link, token = device_link_create(user=user)
    assert link.token_hash != token and token not in link.token_hash  # only a hash is kept
    assert device_link_open(user=user, token=token).pk == link.pk
    with pytest.raises(DeviceError) as replayed:
        device_link_open(user=user, token=token)
    assert replayed.value.code == "link_used"


def test_it_refuses_an_expired_link_and_changes_nothing(webauthn, user):
    _register(user)
    link, token = device_link_create(user=user)
    DeviceLink.objects.filter(pk=link.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(DeviceError) as expired:
        device_link_open(user=user, token=token)
    assert expired.value.code == "link_expired"
    assert DeviceLink.objects.get(pk=link.pk).opened_at is None


def test_the_link_page_says_why_a_link_is_refused(webauthn, client, user, other_user):
    _register(user)
    link, token = device_link_create(user=user)
    url = reverse("device-link-open", args=[token])

    client.force_login(other_user)
    response = client.get(url)
    assert response.status_code == 403
    assert "made for another Picnic account" in response.content.decode()
    assert DeviceLink.objects.get(pk=link.pk).opened_at is None  # nothing changed
    assert "device_link_id" not in client.session

    client.force_login(user)
    response = client.get(url)
    assert (
        response.status_code == 200
        and "Create a passkey on this device" in response.content.decode()
    )
    assert client.session["device_link_id"] == link.pk

    replay = client.get(url)
    assert replay.status_code == 410 and "already used" in replay.content.decode()

    unknown = client.get(reverse("device-link-open", args=["not-a-token"]))
    assert unknown.status_code == 410 and "does not work" in unknown.content.decode()


def test_the_expired_link_page_says_it_expired(webauthn, client, user):
    _register(user)
    link, token = device_link_create(user=user)
    DeviceLink.objects.filter(pk=link.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    client.force_login(user)
    response = client.get(reverse("device-link-open", args=[token]))
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert DeviceLink.objects.get(pk=link.pk).opened_at is None


def test_a_passkey_registered_after_opening_a_link_belongs_to_it(webauthn, client, user):
    _register(user)
    link, token = device_link_create(user=user)
    client.force_login(user)
    client.get(reverse("device-link-open", args=[token]))
    authenticator = SoftwarePasskey(rp_id="localhost", origin=ORIGIN)
    options = client.post(reverse("passkey-options")).json()
    from webauthn.helpers import base64url_to_bytes  # noqa: PLC0415 (only this test decodes)

    challenge = base64url_to_bytes(options["challenge"])
    response = client.post(
        reverse("passkey-verify"),
        data=json.dumps(authenticator.create(challenge)),
        content_type="application/json",
        HTTP_USER_AGENT="Mozilla/5.0 (Windows NT 10.0) Chrome/140",
        REMOTE_ADDR="198.51.100.23",
    )
    assert response.status_code == 200, response.content
    link.refresh_from_db()
    new = link.passkey
    assert new.owner_state == OwnerState.PENDING
    assert new.user_agent.startswith("Mozilla/5.0 (Windows") and new.ip_coarse == "198.51.100.0/24"
    page = client.get(reverse("passkeys")).content.decode()
    assert "Waiting for approval: signs nothing yet" in page
    assert f'id="approve-device-{new.pk}"' in page


# --- removal: the last owner stays ---------------------------------------------------------


def test_it_never_removes_the_last_owner(webauthn, user):
    first, _ = _register(user)
    second, _ = _register(user)
    _activate(second, 1)
    removal_claim(user=user, signer_id=first.pk, target_id=second.pk)
    assert Passkey.objects.get(pk=second.pk).owner_state == OwnerState.REMOVING
    # The other device now tries to remove the first: it is itself being removed.
    with pytest.raises(PasskeyError) as refused:
        removal_claim(user=user, signer_id=second.pk, target_id=first.pk)
    assert refused.value.code == "passkey_removing"
    assert Passkey.objects.get(pk=first.pk).owner_state == OwnerState.ACTIVE


def test_a_passkey_cannot_remove_itself_nor_the_only_owner(webauthn, user):
    first, _ = _register(user)
    with pytest.raises(PasskeyError) as refused:
        removal_claim(user=user, signer_id=first.pk, target_id=first.pk)
    assert refused.value.code in ("self_removal", "last_owner")
    assert Passkey.objects.get(pk=first.pk).owner_state == OwnerState.ACTIVE


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_devices_removing_each_other_leave_exactly_one_owner(webauthn, make_user):
    if connection.vendor != "postgresql":
        pytest.skip("the race needs row locks (PostgreSQL)")
    user = make_user("racer")
    first, _ = _register(user)
    second, _ = _register(user)
    _activate(second, 1)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def remove(signer: Passkey, target: Passkey) -> None:
        from django.db import connections, transaction  # noqa: PLC0415 (per thread)

        try:
            barrier.wait()
            with transaction.atomic():
                removal_claim(user=user, signer_id=signer.pk, target_id=target.pk)
            outcomes.append("removed")
        except PasskeyError as exc:
            outcomes.append(exc.code)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=remove, args=(first, second)),
        threading.Thread(target=remove, args=(second, first)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["passkey_removing", "removed"]
    states = sorted(Passkey.objects.filter(user=user).values_list("owner_state", flat=True))
    assert states == [OwnerState.ACTIVE, OwnerState.REMOVING]


# --- account changes as tracked work ---------------------------------------------------------


def _change(
    user, *, kind=AccountChangeKind.RECOVERY, status=AccountChangeStatus.PROPOSED, **values
):
    return create(
        lifecycle=lifecycle_named("accountChange"),
        actor=Actor.end_user(user),
        values={"kind": kind, "user": user, "account": ACCOUNT, "status": status, **values},
    )


def test_account_changes_are_a_registered_lifecycle_with_history(user):
    change = _change(user, kind=AccountChangeKind.ADD_OWNER)
    transition(
        lifecycle=lifecycle_named("accountChange"),
        pk=change.pk,
        to=AccountChangeStatus.SIGNED,
        actor=Actor.end_user(user),
    )
    rows = list(
        AccountChangeHistory.objects.filter(change=change).values_list("from_status", "status")
    )
    assert rows == [(None, "proposed"), ("proposed", "signed")]
    assert AccountChange.objects.get(pk=change.pk).signed_at is not None


def test_account_changes_are_not_action_types(user):
    assert {"transfer", "swap", "cardFreeze"} <= set(ActionType.values)
    assert not set(AccountChangeKind.values) & set(ActionType.values)


def test_staff_see_a_waiting_recovery_but_cannot_move_it(client, user, staff_user):
    from console.moves import MOVES  # noqa: PLC0415 (the console's own table)
    from console.selectors import Filters, needs_attention  # noqa: PLC0415

    change = _change(
        user,
        status=AccountChangeStatus.WAITING,
        ready_at=timezone.now() - timedelta(hours=2),
    )
    AccountChange.objects.filter(pk=change.pk).update(
        updated_at=timezone.now() - timedelta(hours=3)
    )
    listed = needs_attention(Filters(kind="accountChange"))
    assert [row.id for row in listed.rows] == [str(change.pk)]
    assert listed.rows[0].why == "recovery waiting past its delay"
    assert not any(move.kind == "accountChange" for move in MOVES.values())

    staff_user.is_superuser = True
    staff_user.save()
    client.force_login(staff_user)
    page = client.get(reverse("actions-staff:account-change-timeline", args=[change.pk]))
    assert page.status_code == 200 and "waiting" in page.content.decode()
    # The end users' cancel is for the account's own user only: staff get nothing moved.
    client.post(reverse("recovery-cancel", args=[change.pk]))
    assert AccountChange.objects.get(pk=change.pk).status == AccountChangeStatus.WAITING
    assert AccountChange.objects.count() == 1


# --- recovery: one answer for a wrong code and an unknown name, throttled -------------------


@pytest.fixture
def recoverable(webauthn, user):
    """A user whose account has a recovery key set (its change executed), from a known code."""
    from evm.recovery import recovery_key_from_code  # noqa: PLC0415

    cache.clear()  # the attempt counts of earlier tests (same client address)
    _register(user)
    code = "ABCDE-FGHJK-MNPQR-STVWX-YZ012"
    change = _change(user, kind=AccountChangeKind.SET_RECOVERY, status=AccountChangeStatus.EXECUTED)
    RecoverySetup.objects.create(
        user=user,
        account=ACCOUNT,
        recovery_address=recovery_key_from_code(code, ACCOUNT).address,
        delay_seconds=3600,
        change=change,
    )
    return user, code


def _recover(client, username: str, code: str):
    client.post(
        reverse("recover-options"),
        data=json.dumps({"username": username}),
        content_type="application/json",
    )
    return client.post(
        reverse("recover-verify"),
        data=json.dumps({"code": code, "credential": {"id": "x"}}),
        content_type="application/json",
    )


def test_a_wrong_code_gets_the_same_answer_as_an_unknown_name(recoverable, client):
    user, code = recoverable
    wrong = _recover(client, user.username, "ZZZZZ-ZZZZZ-ZZZZZ-ZZZZZ-ZZZZZ")
    unknown = _recover(client, "nobody-here", code)
    malformed = _recover(client, user.username, "hello")
    assert wrong.status_code == unknown.status_code == malformed.status_code == 400
    assert wrong.json() == unknown.json() == malformed.json()
    assert wrong.json()["code"] == "recovery_refused"
    assert Passkey.objects.filter(user=user).count() == 1  # nothing registered
    assert not AccountChange.objects.filter(kind=AccountChangeKind.RECOVERY).exists()


def _options(client, username: str) -> dict:
    answer = client.post(
        reverse("recover-options"),
        data=json.dumps({"username": username}),
        content_type="application/json",
    )
    assert answer.status_code == 200
    return answer.json()


def _shape(value):
    """The options with every string replaced by its length: what an observer compares."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return len(value) if isinstance(value, str) else value


def test_recovery_options_look_the_same_for_a_known_and_an_unknown_username(recoverable, client):
    user, _ = recoverable
    unknown = "z" * len(user.username)  # the same length: the name is echoed as user.name

    known_options = _options(client, user.username)
    unknown_options = _options(client, unknown)

    assert _shape(known_options) == _shape(unknown_options)
    handle = base64url_to_bytes(known_options["user"]["id"])
    assert handle == recovery_user_handle(username=user.username) != str(user.pk).encode()
    assert len(handle) == len(base64url_to_bytes(unknown_options["user"]["id"])) == 32
    # Stable for a name, known or not, and different between names.
    assert _options(client, unknown)["user"]["id"] == unknown_options["user"]["id"]
    assert known_options["user"]["id"] != unknown_options["user"]["id"]
    assert Passkey.objects.filter(user=user).count() == 1  # options register nothing


def test_recovery_attempts_are_throttled(recoverable, client, settings):
    user, code = recoverable
    settings.RECOVERY_ATTEMPTS = 2
    for _ in range(2):
        assert _recover(client, user.username, "ZZZZZ-ZZZZZ-ZZZZZ-ZZZZZ-ZZZZZ").status_code == 400
    # Even the right code is refused while throttled, and nothing is derived or registered.
    throttled = _recover(client, user.username, code)
    assert throttled.status_code == 429 and throttled.json()["code"] == "throttled"
    assert Passkey.objects.filter(user=user).count() == 1


def test_the_recovery_page_needs_no_sign_in(client):
    page = client.get(reverse("recover"))
    assert page.status_code == 200 and 'id="recover-code"' in page.content.decode()


def test_it_lists_changes_and_a_recovery_in_progress_on_the_passkeys_page(webauthn, client, user):
    _register(user)
    change = _change(
        user, status=AccountChangeStatus.WAITING, ready_at=timezone.now() + timedelta(hours=48)
    )
    client.force_login(user)
    page = client.get(reverse("passkeys")).content.decode()
    assert 'id="recoveries"' in page and 'id="cancel-recovery"' in page
    assert f'href="/account-changes/{change.pk}/"' in page


def test_the_add_device_page_shows_a_qr_code_and_a_one_use_link(webauthn, client, user):
    _register(user)
    client.force_login(user)
    page = client.post(reverse("device-link")).content.decode()
    assert "<svg" in page and 'id="device-link-url"' in page
    assert DeviceLink.objects.filter(user=user, opened_at__isnull=True).count() == 1


# --- a recovery's passkey: named a recovery, only cancel, never approved --------------------


def _recovery_passkey(user, *, ready_at=None):
    """A passkey registered by a recovery (pending) and its waiting recovery change, as
    recovery_start leaves them (without the chain)."""
    passkey, _ = _register(user)
    change = _change(
        user,
        status=AccountChangeStatus.WAITING,
        passkey=passkey,
        ready_at=ready_at or timezone.now() + timedelta(hours=48),
    )
    return passkey, change


def test_the_passkeys_page_names_a_recovery_passkey_and_offers_only_cancel(webauthn, client, user):
    first, _ = _register(user)
    _activate(first, 0)
    linked, _ = _register(user)  # a device added through a link: pending, approvable
    recovered, change = _recovery_passkey(user)
    client.force_login(user)
    page = client.get(reverse("passkeys")).content.decode()

    assert f'id="approve-device-{linked.pk}"' in page and f'id="remove-{linked.pk}"' in page
    assert f'id="approve-device-{recovered.pk}"' not in page
    assert f'id="remove-{recovered.pk}"' not in page
    assert "Recovery requested" in page and "ready at" in page
    assert f'action="{reverse("recovery-cancel", args=[change.pk])}"' in page
    assert f'id="cancel-recovery-{recovered.pk}"' in page


def test_approving_a_recovery_passkey_is_refused_in_the_error_shape(webauthn, client, user):
    first, _ = _register(user)
    _activate(first, 0)
    recovered, change = _recovery_passkey(user)
    client.force_login(user)

    answer = client.post(reverse("device-approve", args=[recovered.pk]))

    assert answer.status_code == 409
    body = answer.json()
    assert body["code"] == "recovery_passkey" and body["errors"] == {} and body["detail"]
    assert not AccountChange.objects.filter(kind=AccountChangeKind.ADD_OWNER).exists()
    assert Passkey.objects.get(pk=recovered.pk).owner_state == OwnerState.PENDING
    assert list(change.history.values_list("status", flat=True)) == ["waiting"]


def test_an_add_owner_change_for_a_recovery_passkey_cannot_be_signed(webauthn, user):
    from actions.accounts.owner_changes import owner_change_sign

    first, authenticator = _register(user)
    _activate(first, 0)
    recovered, _ = _recovery_passkey(user)
    # Built before the refusal existed (or by any path that skipped it): signing refuses it.
    add = _change(user, kind=AccountChangeKind.ADD_OWNER, passkey=recovered, challenge="0x00")
    with pytest.raises(PasskeyError) as refused:
        owner_change_sign(change_id=add.pk, user=user, credential_json="{}")
    assert refused.value.code == "recovery_passkey"
    assert AccountChange.objects.get(pk=add.pk).status == AccountChangeStatus.PROPOSED


def test_a_recovery_passkey_is_not_removed_behind_its_recovery(webauthn, client, user):
    first, _ = _register(user)
    _activate(first, 0)
    recovered, change = _recovery_passkey(user)
    client.force_login(user)
    client.post(reverse("passkey-remove", args=[recovered.pk]))
    assert Passkey.objects.get(pk=recovered.pk).owner_state == OwnerState.PENDING
    assert AccountChange.objects.get(pk=change.pk).passkey_id == recovered.pk
