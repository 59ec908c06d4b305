"""A device as people name it ("Chrome on macOS"), on the passkeys page, the approval page and
in the e-mail; never the raw User-Agent nor the network it came from ("203.0.113.0/24"),
which stay stored as they came."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import translation

from actions.accounts.mail import DEVICE_ADDED, account_change_mail
from actions.accounts.models import AccountChangeKind, Passkey, Preferences
from actions.tests.test_devices import _activate, _change, _register
from core.user_agents import device_description

CHROME_MAC = (
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)
NETWORK = "203.0.113.0/24"


@pytest.mark.parametrize(
    ("user_agent", "shown"),
    [
        (CHROME_MAC, "Chrome on macOS"),
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
            "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
            "Safari on iPhone",
        ),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0",
            "Firefox on Windows",
        ),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
            "Edge on Windows",
        ),
        (
            "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/131.0.0.0 Mobile Safari/537.36",
            "Chrome on Android",
        ),
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
            "(KHTML, like Gecko) CriOS/131.0.6778.73 Mobile/15E148 Safari/604.1",
            "Chrome on iPhone",
        ),
        (
            "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
            "Firefox on Linux",
        ),
        ("Mozilla/5.0 (Linux; Android 14; K) Mobile", "Unknown browser on Android"),
        ("a new phone", "Unknown browser"),
        ("", ""),
    ],
)
def test_it_names_the_device_of_a_user_agent(user_agent, shown):
    with translation.override("en"):
        assert device_description(user_agent) == shown


def test_the_device_name_is_translated():
    with translation.override("pt-br"):
        assert device_description(CHROME_MAC) == "Chrome no macOS"
        assert device_description("curl/8") == "Navegador desconhecido"
    with translation.override("es"):
        assert device_description(CHROME_MAC) == "Chrome en macOS"
        assert device_description("Android") == "Navegador desconocido en Android"


def _second_device(user) -> Passkey:
    _register(user)
    second, _ = _register(user, device={"user_agent": CHROME_MAC, "ip_coarse": NETWORK})
    return second


def _assert_named(html: str, shown: str) -> None:
    assert f'<dd class="device-agent">{shown}</dd>' in html
    assert "Mozilla/5.0" not in html and "AppleWebKit" not in html
    assert NETWORK not in html and "/24" not in html


@pytest.mark.parametrize(
    ("language", "shown"), [("en", "Chrome on macOS"), ("pt-BR", "Chrome no macOS")]
)
def test_the_passkeys_page_names_the_device(webauthn, client, user, language, shown):
    _second_device(user)
    client.force_login(user)
    html = client.get(reverse("passkeys"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
    _assert_named(html, shown)
    assert Passkey.objects.filter(user_agent=CHROME_MAC, ip_coarse=NETWORK).count() == 1  # kept


def test_the_approval_page_names_the_device(webauthn, client, user):
    second = _second_device(user)
    change = _change(user, kind=AccountChangeKind.ADD_OWNER, passkey=second)
    client.force_login(user)
    html = client.get(reverse("account-change", args=[change.pk])).content.decode()
    _assert_named(html, "Chrome on macOS")


def test_the_device_mail_names_the_device(webauthn, user, mailoutbox):
    Preferences.objects.create(user=user, language="pt-br")
    second = _activate(_second_device(user), 1)
    change = _change(user, kind=AccountChangeKind.ADD_OWNER, passkey=second)
    account_change_mail(change_id=change.pk, event=DEVICE_ADDED)
    (mail,) = mailoutbox
    assert "(Chrome no macOS)" in mail.body
    assert "Mozilla/5.0" not in mail.body and NETWORK not in mail.body
