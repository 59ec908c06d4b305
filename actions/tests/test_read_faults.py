"""The read tools against a chain RPC that fails: refused, hanging, dropping, HTTP 500,
garbage, JSON-RPC errors. get_balances and get_card answer 503 with the reason and invent
nothing; get_transactions still serves what it indexed before and says why it is stale."""

from __future__ import annotations

import pytest

from actions.models import Card, Passkey, SmartAccount
from picnic.testing import ScriptedServer

pytestmark = pytest.mark.django_db
MODES = ["refused", "hang", "drop", "http500", "garbage", "rpc_error", "wrong_shape"]


@pytest.fixture
def rpc(settings):
    with ScriptedServer() as server:
        settings.CHAIN_RPC_URL = server.url
        settings.CHAIN_READ_TIMEOUT_SECONDS = 0.5
        yield server


@pytest.fixture
def accounts(user):
    from actions.demo import ensure_demo_tokens

    ensure_demo_tokens()
    passkey = Passkey.objects.create(
        user=user,
        credential_id="cred-1",
        public_key=b"\x00",
        public_key_x="0x" + "11" * 32,
        public_key_y="0x" + "22" * 32,
    )
    account = SmartAccount.objects.create(
        user=user,
        kind="picnic",
        chain_id=31337,
        address="0x" + "ab" * 20,
        owner="passkey:cred-1",
        passkey=passkey,
        entry_point_version="0.7",
    )
    Card.objects.create(
        user=user,
        card_id="card-1",
        last4="4242",
        safe_address="0x" + "cd" * 20,
        chain_id=31337,
        delay_address="0x" + "01" * 20,
        roles_address="0x" + "02" * 20,
    )
    return account


def _break(rpc, settings, mode: str) -> None:
    if mode == "refused":
        settings.CHAIN_RPC_URL = "http://127.0.0.1:9"
    elif mode == "wrong_shape":
        rpc.result = {"not": "what was asked"}  # one object where a batch answer is due
    else:
        rpc.mode = mode


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("path", "scope"), [("/api/v1/balances", "read:balances"), ("/api/v1/card", "read:card")]
)
def test_balances_and_card_answer_503_with_the_reason(
    rpc, settings, accounts, user, application, make_token, client, mode, path, scope
):
    _break(rpc, settings, mode)
    token = make_token(user, application, scope=scope)
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token.token}")
    assert response.status_code == 503, response.content
    assert response.json()["detail"].startswith("The chain could not be read")


@pytest.mark.parametrize("mode", MODES)
def test_transactions_report_a_chain_that_fails_and_serve_the_index(
    rpc, settings, accounts, user, application, make_token, client, mode
):
    from django.utils import timezone

    from actions.models import HistoryEntry

    HistoryEntry.objects.create(user=user, occurred_at=timezone.now(), kind="cardFreeze")
    _break(rpc, settings, mode)
    token = make_token(user, application, scope="read:transactions")
    body = client.get("/api/v1/transactions", HTTP_AUTHORIZATION=f"Bearer {token.token}").json()
    assert body["sync"]["chain"]["error"].startswith("The chain could not be read")
    assert body["sync"]["chain"]["syncedToBlock"] is None
    assert [t["type"] for t in body["transactions"]] == ["cardFreeze"]
    assert SmartAccount.objects.get(pk=accounts.pk).history_synced_block == -1


READERS = [
    ("/api/v1/balances", "read:balances", "balances_for_user"),
    ("/api/v1/card", "read:card", "card_for_user"),
]


@pytest.mark.parametrize(("path", "scope", "reader"), READERS)
def test_a_named_rpc_failure_is_a_503_that_says_so(
    monkeypatch, user, application, make_token, client, path, scope, reader
):
    import requests

    from actions import views

    def refused(**kwargs):
        raise requests.ConnectionError("connection refused")

    monkeypatch.setattr(views, reader, refused)
    token = make_token(user, application, scope=scope)
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token.token}")
    assert response.status_code == 503
    assert response.json() == {
        "detail": "The chain could not be read: connection refused",
        "code": "chain_unavailable",
        "errors": {},
    }


@pytest.mark.parametrize(("path", "scope", "reader"), READERS)
def test_a_bug_in_a_chain_read_is_a_logged_500_not_an_outage(
    monkeypatch, caplog, user, application, make_token, client, path, scope, reader
):
    from actions import views

    def buggy(**kwargs):
        raise KeyError("allowance")  # our mistake, not the chain's

    monkeypatch.setattr(views, reader, buggy)
    client.raise_request_exception = False
    token = make_token(user, application, scope=scope)
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token.token}")
    assert response.status_code == 500
    assert b"could not be read" not in response.content
    logged = [r for r in caplog.records if r.name == "django.request" and r.levelname == "ERROR"]
    assert logged and logged[-1].exc_info[0] is KeyError
