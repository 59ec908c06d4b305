"""One clock on end-user pages and in their e-mails: the user's zone, to the minute, with the
zone's short name ("6 de dez. de 2026 09:32 BRT"); its IANA name only on hover (a <time>'s
title), never as text; the recovery page's answer says its zone too."""

from __future__ import annotations

import html as html_lib
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone, translation

from actions.accounts import recovery
from actions.accounts.mail import RECOVERY_STARTED, account_change_mail
from actions.accounts.models import (
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    Preferences,
)
from actions.tests import test_enduser_pages as pages
from actions.tests.test_devices import ORIGIN, _change, _register
from actions.tests.test_enduser_pages import transfer
from core import l10n
from core.templatetags.enduser import local_time
from core.timezones import USER_ZONE_SESSION_KEY, zone_named

pytestmark = pytest.mark.django_db
offline, wallet, owner = pages.offline, pages.wallet, pages.owner  # the end-user pages' fixtures

ZONE = "America/Sao_Paulo"
WHEN = datetime(2026, 12, 6, 12, 32, 50, tzinfo=UTC)  # 09:32:50 in São Paulo
SHOWN = "6 de dez. de 2026 09:32 BRT"


@pytest.fixture
def webauthn(settings):
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.WEBAUTHN_ORIGIN = ORIGIN
    return settings


def visible(html: str) -> str:
    """What a reader sees: the text, without the tags (and their attributes) or scripts."""
    html = re.sub(r"<script\b.*?</script>", " ", html, flags=re.S)
    html = re.sub(r"</?(code|strong|span|em|a|time)\b[^>]*>", "", html)  # inline: no gap
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", html)).split())


def in_sao_paulo(client, user) -> None:
    """The user's stored zone, in their session as after their login (core.timezones)."""
    Preferences.objects.update_or_create(
        user=user, defaults={"time_zone": ZONE, "language": "pt-br"}
    )
    session = client.session
    session[USER_ZONE_SESSION_KEY] = ZONE
    session.save()


def assert_one_clock(html: str) -> str:
    text = visible(html)
    assert ZONE not in text, re.findall(r".{40}America/Sao_Paulo.{10}", text)
    assert re.search(r"\d:\d\d:\d\d", text) is None  # to the minute, as everywhere
    # the IANA name only on hover
    assert f'data-local title="{ZONE}"' in html
    return text


# --- the format ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "zone", "shown"),
    [
        ("pt-br", ZONE, SHOWN),
        ("es", "Europe/Madrid", "6 dic 2026, 13:32 CET"),
        ("es", ZONE, "6 dic 2026, 9:32 UTC\u221203:00"),  # no letters for it in es: the offset
        ("pt-br", "America/Argentina/Buenos_Aires", "6 de dez. de 2026 09:32 UTC\u221203:00"),
        ("pt-br", "Asia/Kathmandu", "6 de dez. de 2026 18:17 UTC+05:45"),
        ("en", "UTC", "Dec 6, 2026, 12:32\u202fPM UTC"),
    ],
)
def test_it_writes_the_local_time_with_the_zones_short_name(language, zone, shown):
    with translation.override(language), timezone.override(zone_named(zone)):
        assert l10n.format_datetime(WHEN) == shown
        assert str(local_time(WHEN)) == (
            f'<time datetime="2026-12-06T12:32:50Z" data-local title="{zone}">{shown}</time>'
        )


# --- pages -----------------------------------------------------------------------------------


def test_the_passkeys_page_has_one_clock(webauthn, client, user):
    _register(user)
    _change(user, status=AccountChangeStatus.WAITING, ready_at=WHEN)
    AccountChange.objects.filter(user=user).update(created_at=WHEN - timedelta(hours=48))
    client.force_login(user)
    in_sao_paulo(client, user)
    page = client.get(reverse("passkeys"), HTTP_ACCEPT_LANGUAGE="pt-BR")
    text = assert_one_clock(page.content.decode())
    # the recovery in progress: when it started and when it is ready, both in São Paulo
    assert f"a partir de {SHOWN}" in text and "(4 de dez. de 2026 09:32 BRT)" in text


def test_the_account_change_page_has_one_clock(webauthn, client, user):
    _register(user)
    change = _change(user, status=AccountChangeStatus.WAITING, ready_at=WHEN)
    client.force_login(user)
    in_sao_paulo(client, user)
    page = client.get(reverse("account-change", args=[change.pk]), HTTP_ACCEPT_LANGUAGE="pt-BR")
    text = assert_one_clock(page.content.decode())
    assert SHOWN in text


def test_the_signing_page_has_one_clock(owner, user, application):
    action = transfer(user, application)
    in_sao_paulo(owner, user)
    page = owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="pt-BR")
    text = assert_one_clock(page.content.decode())
    expires = timezone.localtime(action.expires_at, zone_named(ZONE))
    assert f"{expires:%H:%M} BRT" in text


# --- e-mail ----------------------------------------------------------------------------------


def test_the_recovery_mail_says_the_zones_short_name_not_its_iana_name(webauthn, user, mailoutbox):
    Preferences.objects.create(user=user, language="pt-br", time_zone=ZONE)
    _register(user)
    change = _change(user, kind=AccountChangeKind.RECOVERY, ready_at=WHEN)
    account_change_mail(change_id=change.pk, event=RECOVERY_STARTED)
    (mail,) = mailoutbox
    assert f"({SHOWN})" in mail.body
    assert ZONE not in mail.body and "<time" not in mail.body


# --- the recovery page -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "shown"),
    [
        (ZONE, SHOWN),  # the user's zone, as their e-mail says it
        ("", "6 de dez. de 2026 12:32 UTC"),  # none stored: UTC, and it says so
    ],
)
def test_the_recovery_page_says_the_zone_of_its_time(
    webauthn, client, user, monkeypatch, zone, shown
):
    if zone:
        Preferences.objects.create(user=user, time_zone=zone)
    change = _change(user, kind=AccountChangeKind.RECOVERY, status=AccountChangeStatus.WAITING)
    AccountChange.objects.filter(pk=change.pk).update(ready_at=WHEN)
    change.refresh_from_db()
    # the recovery itself (a passkey, the chain) is the service's, tested with the chain
    monkeypatch.setattr(recovery, "recovery_start", lambda **kwargs: change)
    client.post(
        reverse("recover-options"), {"username": user.username}, content_type="application/json"
    )
    answer = client.post(
        reverse("recover-verify"),
        {"code": "ABCDE-FGHJK-MNPQR-STVWX-YZ012", "credential": {"id": "x"}},
        content_type="application/json",
        HTTP_ACCEPT_LANGUAGE="pt-BR",
    )
    assert answer.status_code == 200, answer.content
    message = answer.json()["message"]
    assert f"({shown})" in message, message
    assert ZONE not in message
