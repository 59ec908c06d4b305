"""Account changes over time, without the chain: a proposal nobody signs expires (and its page
says so), nothing signed ever does; e-mails about a device or a recovery are written in the
user's language and time zone; a change one chain still misses is stuck for staff."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings as django_settings
from django.urls import reverse
from django.utils import timezone

from actions.accounts.mail import (
    DEVICE_ADDED,
    DEVICE_REMOVED,
    RECOVERY_STARTED,
    account_change_mail,
)
from actions.accounts.models import (
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    Passkey,
    Preferences,
)
from actions.accounts.owner_changes import (
    account_changes_expire,
    owner_change_propose,
    owner_change_sign,
)
from actions.accounts.passkeys import PasskeyError
from actions.tests.test_devices import _change, _register
from core.lifecycle import Actor, record_history

pytestmark = pytest.mark.django_db

K = AccountChangeKind
S = AccountChangeStatus


def _aged(change: AccountChange, seconds: int) -> AccountChange:
    AccountChange.objects.filter(pk=change.pk).update(
        created_at=timezone.now() - timedelta(seconds=seconds)
    )
    return AccountChange.objects.get(pk=change.pk)


def test_it_expires_a_proposal_left_unsigned_and_never_a_signed_step(user, settings):
    settings.ACCOUNT_CHANGE_EXPIRY_SECONDS = 600
    overdue = _aged(_change(user, kind=K.ADD_OWNER), 601)
    fresh = _aged(_change(user, kind=K.REMOVE_OWNER), 590)
    # Signed, on its way, waiting on chain: on a chain already (or about to be), never expired.
    on_chain = [
        _aged(_change(user, kind=K.ADD_OWNER, status=st), 10_000) for st in (S.SIGNED, S.SUBMITTED)
    ]
    recovery = _aged(_change(user, kind=K.RECOVERY, status=S.WAITING), 10_000)
    relayed = _aged(_change(user, kind=K.RECOVERY), 10_000)  # a recovery is relayed, not signed

    assert account_changes_expire() == 1
    assert account_changes_expire() == 0  # once
    statuses = dict(AccountChange.objects.values_list("pk", "status"))
    assert statuses[overdue.pk] == S.EXPIRED
    assert statuses[fresh.pk] == S.PROPOSED
    assert [statuses[c.pk] for c in on_chain] == [S.SIGNED, S.SUBMITTED]
    assert statuses[recovery.pk] == S.WAITING and statuses[relayed.pk] == S.PROPOSED
    last = overdue.history.order_by("-timestamp").first()
    assert (last.from_status, last.status, last.actor_kind) == ("proposed", "expired", "system")
    assert last.detail == "not signed within 600 s"


def test_an_expired_change_page_says_so_and_it_can_no_longer_be_signed(
    webauthn, client, user, settings
):
    settings.ACCOUNT_CHANGE_EXPIRY_SECONDS = 600
    _register(user)
    change = _aged(_change(user, kind=K.ADD_OWNER, challenge="0x" + "11" * 32), 900)
    client.force_login(user)

    # Expired on read, before any sweep: the page says it in words, and in the user's language.
    page = client.get(
        reverse("account-change", args=[change.pk]), HTTP_ACCEPT_LANGUAGE="pt-BR"
    ).content.decode()
    assert 'id="expired"' in page and "não foi aprovada em 10 minutos" in page
    assert 'id="approve"' not in page
    assert AccountChange.objects.get(pk=change.pk).status == S.EXPIRED

    options = client.post(reverse("account-change-options", args=[change.pk]))
    assert options.status_code == 410 and options.json()["code"] == "change_expired"
    with pytest.raises(PasskeyError) as refused:
        owner_change_sign(change_id=change.pk, user=user, credential_json="{}")
    assert refused.value.code == "change_expired"
    assert list(change.history.values_list("status", flat=True)) == ["proposed", "expired"]


def test_a_change_is_refused_while_another_is_still_being_applied(webauthn, user):
    first, _ = _register(user)
    second, _ = _register(user)
    _change(user, kind=K.ADD_OWNER, status=S.SUBMITTED)
    with pytest.raises(PasskeyError) as refused:
        owner_change_propose(user=user, kind=K.ADD_OWNER, passkey=second)
    assert refused.value.code == "change_in_progress"
    assert AccountChange.objects.count() == 1


# --- e-mail in the user's language and time zone ---------------------------------------------

EXECUTED_AT = datetime(2026, 12, 4, 18, 30, tzinfo=UTC)


def _executed(user, kind, passkey) -> AccountChange:
    change = _change(user, kind=kind, status=S.EXECUTED, passkey=passkey)
    AccountChange.objects.filter(pk=change.pk).update(
        executed_at=EXECUTED_AT, ready_at=EXECUTED_AT + timedelta(hours=48)
    )
    return change


@pytest.mark.parametrize(
    ("language", "zone", "subject", "when"),
    [
        (
            "pt-br",
            "America/Sao_Paulo",
            "Picnic: um dispositivo foi adicionado à sua conta",
            "15:30 BRT",  # the zone's short name, not its IANA name
        ),
        ("es", "Europe/Madrid", "Picnic: se añadió un dispositivo a tu cuenta", "19:30 CET"),
        ("", "", "Picnic: a device was added to your account", "6:30\u202fPM UTC"),  # the site's
    ],
)
def test_device_mail_is_in_the_users_language_and_time_zone(
    webauthn, user, mailoutbox, language, zone, subject, when
):
    user.email = "alice@example.com"
    user.save()
    if language:
        Preferences.objects.create(user=user, language=language, time_zone=zone)
    passkey, _ = _register(user)
    Passkey.objects.filter(pk=passkey.pk).update(name="Laptop")
    account_change_mail(change_id=_executed(user, K.ADD_OWNER, passkey).pk, event=DEVICE_ADDED)
    (mail,) = mailoutbox
    assert mail.subject == subject and mail.to == ["alice@example.com"]
    assert "Laptop" in mail.body and when in mail.body
    assert not zone or zone not in mail.body


def test_removal_and_recovery_mails_follow_the_language_too(webauthn, user, mailoutbox):
    user.email = "alice@example.com"
    user.save()
    Preferences.objects.create(user=user, language="es", time_zone="America/Sao_Paulo")
    passkey, _ = _register(user)
    account_change_mail(change_id=_executed(user, K.REMOVE_OWNER, passkey).pk, event=DEVICE_REMOVED)
    account_change_mail(change_id=_executed(user, K.RECOVERY, passkey).pk, event=RECOVERY_STARTED)
    removed, started = mailoutbox
    assert removed.subject == "Picnic: se quitó un dispositivo de tu cuenta"
    assert started.subject == "Picnic: alguien empezó a recuperar tu cuenta"
    # readyAt written in the user's zone (48 h after 18:30 UTC is 15:30 in São Paulo); es has
    # no letters for that zone: its offset.
    assert (
        "15:30 UTC\u221203:00" in started.body
        and "America/Sao_Paulo" not in started.body
        and "UTC " not in started.body
    )


def test_the_passkeys_page_remembers_the_language_for_e_mail(webauthn, client, user):
    client.force_login(user)
    client.get(reverse("passkeys"), HTTP_ACCEPT_LANGUAGE="es")
    assert Preferences.objects.get(user=user).language == "es"
    client.cookies[django_settings.LANGUAGE_COOKIE_NAME] = "pt-br"
    client.get(reverse("passkeys"))
    assert Preferences.objects.get(user=user).language == "pt-br"


# --- a change one chain still misses ---------------------------------------------------------


def test_a_change_applied_on_one_chain_only_is_stuck_for_staff_until_whole(user):
    from console.selectors import Filters, needs_attention  # noqa: PLC0415 (the console's view)

    ops = [
        {"chain_id": 31337, "user_op_hash": "0x" + "01" * 32, "done": True, "tx_hash": "0xaa"},
        {"chain_id": 31338, "user_op_hash": "0x" + "02" * 32, "done": False, "tx_hash": None},
    ]
    change = _change(
        user, kind=K.ADD_OWNER, status=S.SUBMITTED, ops=ops, behind_since=timezone.now()
    )
    record_history(
        lifecycle=change.lifecycle,
        instance=change,
        from_status=S.SUBMITTED,
        status=S.SUBMITTED,
        actor=Actor.worker(),
        detail="chain 31338 unreachable, retrying",
    )
    listed = needs_attention(Filters(kind="accountChange"))
    assert [row.id for row in listed.rows] == [str(change.pk)]
    assert listed.rows[0].why == "applied on some chains, missing on 31338 (retrying)"
    AccountChange.objects.filter(pk=change.pk).update(behind_since=None)
    assert needs_attention(Filters(kind="accountChange")).rows == []
