"""The end-user routes that take a body, against junk, and the passkey pages when the
chain refuses. Every refusal is a 4xx in the one error body with nothing written; a node that
does not answer is a 503 `chain_unavailable` (page or error body), never a 500. The sweep of
every route of the URL conf is picnic/tests/test_fuzz.py."""

from __future__ import annotations

import pytest
from webauthn.helpers import base64url_to_bytes

from actions.accounts.models import AccountChange, Passkey, RecoverySetup, SmartAccount
from actions.permissions.models import SpendPermission
from actions.tests.factories import make_offline_wallet, make_permission
from chain.passkey_account import SoftwarePasskey
from core.chains import with_endpoints
from dev.testing import ScriptedServer

pytestmark = pytest.mark.django_db

ORIGIN = "http://localhost:8000"
JSON = "application/json"


@pytest.fixture
def closed_chain(settings):
    """The card's chain at a port that was just serving, now closed: connections refused."""
    with ScriptedServer() as server:
        url = server.url
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, rpc_url=url, bundler_url=url)
    settings.BUNDLER_URL = url
    return url


@pytest.fixture
def signed_in(client, user):
    client.raise_request_exception = False
    client.force_login(user)
    return client


def _challenge(client) -> bytes:
    options = client.post("/passkeys/register/options").json()
    return base64url_to_bytes(options["challenge"])


@pytest.mark.parametrize(
    "body",
    [
        b"this is not json",
        b'[1, "two", null]',
        b'"a string"',
        b'{"id": 5, "rawId": [], "response": {"clientDataJSON": {}}, "type": null}',
        b'{"id": "\\u0000", "response": "\\ud800"}',
        b"{}",
    ],
    ids=["not_json", "array", "scalar", "wrong_types", "nul_and_surrogate", "empty"],
)
def test_junk_on_register_verify_is_a_400_and_registers_nothing(webauthn, signed_in, body):
    """It answered 500: py_webauthn's InvalidJSONStructure escaped the view."""
    _challenge(signed_in)
    response = signed_in.generic("POST", "/passkeys/register/verify", body, content_type=JSON)
    assert response.status_code == 400, response.content
    refusal = response.json()
    assert refusal["code"] == "unreadable"
    assert refusal["errors"] == {}
    assert refusal["detail"].startswith("Passkey registration refused: ")
    assert not Passkey.objects.exists()
    assert not SmartAccount.objects.exists()


@pytest.mark.parametrize(
    "junk",
    ["x" * 36, "", "1", "00000000-0000-4000-8000-00000000000", "a" * 60_000],
)
def test_junk_on_revoke_is_a_400_and_revokes_nothing(
    user, application, signed_in, monkeypatch, junk
):
    """A 36-character id that is no UUID answered 500 (a ValidationError from the query); one
    junk id among good ones revoked the good ones first."""
    account = make_offline_wallet(user, monkeypatch)
    permission = make_permission(user=user, application=application, account=account)
    status, key = permission.status, permission.session_key_encrypted
    response = signed_in.post("/permissions/revoke", {"permission": [str(permission.pk), junk]})
    assert response.status_code == 400, response.content
    refusal = response.json()
    assert refusal["code"] == "invalid_input"
    assert list(refusal["errors"]) == ["permission"]
    assert len(response.content) < 1_000  # a prefix of the value at most
    permission.refresh_from_db()
    assert key and (permission.status, permission.session_key_encrypted) == (status, key)
    assert SpendPermission.objects.count() == 1


def test_registration_with_the_chain_refusing_is_a_503_and_registers_nothing(
    webauthn, signed_in, closed_chain
):
    """The account's address is asked of the chain: a refused connection answered 500."""
    challenge = _challenge(signed_in)
    credential = SoftwarePasskey(rp_id="localhost", origin=ORIGIN).create(challenge)
    response = signed_in.post("/passkeys/register/verify", credential, content_type=JSON)
    assert response.status_code == 503, response.content
    refusal = response.json()
    assert refusal["code"] == "chain_unavailable"
    assert refusal["detail"] == "Gnosis (local) could not be read: connection refused"
    assert "127.0.0.1" not in response.content.decode()
    assert not Passkey.objects.exists()
    assert not SmartAccount.objects.exists()


def test_a_new_recovery_code_with_the_chain_refusing_is_a_503_page(
    user, signed_in, monkeypatch, closed_chain
):
    """It answered 500 (ChainUnavailable from building the owner op)."""
    make_offline_wallet(user, monkeypatch)
    response = signed_in.post("/passkeys/recovery-code")
    assert response.status_code == 503
    assert response["Retry-After"] == "60"
    page = response.content.decode()
    assert 'data-code="chain_unavailable"' in page
    assert "Gnosis (local) did not answer" in page
    assert "Nothing changed" in page
    assert closed_chain.split("://")[1] not in page
    assert not AccountChange.objects.exists()
    assert not RecoverySetup.objects.exists()


def test_the_device_link_page_with_the_chain_refusing_is_no_500(
    user, signed_in, monkeypatch, closed_chain
):
    make_offline_wallet(user, monkeypatch)
    for path in ("/passkeys/", "/passkeys/add-device", "/passkeys/recovery-code"):
        response = signed_in.get(path)
        assert response.status_code in (200, 503), (path, response.status_code)
