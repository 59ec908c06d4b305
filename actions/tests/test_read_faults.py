"""The read tools against a chain RPC that fails: refused, hanging, dropping, HTTP 500,
garbage, JSON-RPC errors. get_balances and get_card answer 503 with the reason and invent
nothing; get_transactions still serves what it indexed before and says why it is stale."""

from __future__ import annotations

import re

import pytest

from actions.accounts.models import SmartAccount
from actions.tests.factories import make_offline_wallet
from core.chains import get_chain, with_endpoints
from dev.testing import ScriptedServer

pytestmark = pytest.mark.django_db
MODES = ["refused", "hang", "drop", "http500", "garbage", "rpc_error", "wrong_shape"]


@pytest.fixture
def rpc(settings):
    with ScriptedServer() as server:
        # Both chains' nodes: the same failing server (one chain down: test_chains_reads.py).
        for chain_id in (31337, 31338):
            settings.CHAINS = with_endpoints(chain_id, rpc_url=server.url)
        settings.CHAIN_READ_TIMEOUT_SECONDS = 0.5
        yield server


@pytest.fixture
def accounts(user, monkeypatch):
    return make_offline_wallet(user, monkeypatch)


def _break(rpc, settings, mode: str) -> None:
    if mode == "refused":
        for chain_id in (31337, 31338):
            settings.CHAINS = with_endpoints(chain_id, rpc_url="http://127.0.0.1:9")
    elif mode == "wrong_shape":
        rpc.result = {"not": "what was asked"}  # one object where a batch answer is due
    else:
        rpc.mode = mode


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("path", "scope"), [("/api/v1/balances", "read:balances"), ("/api/v1/card", "read:card")]
)
def test_balances_and_card_answer_503_with_the_reason(
    rpc, settings, accounts, user, application, make_token, api_client, mode, path, scope
):
    _break(rpc, settings, mode)
    token = make_token(user, application, scope=scope)
    response = api_client.get(path, token)
    assert response.status_code == 503, response.content
    detail = response.json()["detail"]
    if path.endswith("card"):  # the card's chain alone
        assert detail.startswith("The chain Gnosis (local) could not be read")
    else:  # every chain failed: each named, with its reason
        assert detail.startswith("The chains Gnosis (local), Base (local) could not be read (")


@pytest.mark.parametrize("mode", MODES)
def test_transactions_report_a_chain_that_fails_and_serve_the_index(
    rpc, settings, accounts, user, application, make_token, api_client, mode
):
    from django.utils import timezone

    from actions.history.models import HistoryEntry

    HistoryEntry.objects.create(user=user, occurred_at=timezone.now(), kind="cardFreeze")
    _break(rpc, settings, mode)
    token = make_token(user, application, scope="read:transactions")
    body = api_client.get("/api/v1/transactions", token).json()
    assert body["sync"]["chain"]["error"].startswith("The chain Gnosis (local) could not be read")
    assert body["sync"]["chain"]["syncedToBlock"] is None
    assert [t["type"] for t in body["transactions"]] == ["cardFreeze"]
    assert SmartAccount.objects.get(pk=accounts.pk).history_synced_block == -1


# Only the errors a failing node causes read as "the chain could not be read"; a bug of ours
# propagates (a 500, logged) instead of being disguised as an outage.


def test_a_bug_in_the_history_sync_propagates_while_an_outage_is_reported(
    rpc, accounts, user, monkeypatch
):
    from actions.history import services as history

    rpc.results = {"eth_blockNumber": "0x10", "eth_getLogs": []}
    rpc.errors = {"eth_blockNumber": {"code": -32603, "message": "node is syncing"}}
    sync = history.history_sync(user=user)
    assert sync["chain"]["error"].startswith("The chain Gnosis (local) could not be read")
    assert "node is syncing" in sync["chain"]["error"]

    rpc.errors = {}

    def bug(address):
        raise TypeError("a bug in our code")

    monkeypatch.setattr(history, "_topic", bug)
    with pytest.raises(TypeError, match="a bug in our code"):
        history.history_sync(user=user)


def test_an_ens_name_the_node_cannot_resolve_is_reported_and_a_bug_propagates(
    rpc, settings, monkeypatch
):
    import dataclasses

    from actions.tool_requests.checks import recipient_of
    from core.chains import get_chain
    from evm.ens import EnsReader, EnsUnavailable

    def chain():
        row = get_chain(settings.CHAIN_ID)
        return dataclasses.replace(
            row, rpc_url=settings.CHAIN_RPC_URL, ens_registry="0x" + "11" * 20
        )

    for mode in ("refused", "hang", "rpc_error", "garbage"):
        settings.CHAIN_RPC_URL, rpc.mode = rpc.url, "result"
        _break(rpc, settings, mode)
        with pytest.raises(
            EnsUnavailable, match=re.escape(f"ENS could not be read on {chain().name}: ")
        ):
            recipient_of("alice.eth", chain())

    def bug(self, name):
        raise KeyError("a bug in our code")

    settings.CHAIN_RPC_URL, rpc.mode = rpc.url, "result"
    monkeypatch.setattr(EnsReader, "resolve", bug)
    with pytest.raises(KeyError, match="a bug in our code"):
        recipient_of("alice.eth", chain())


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
    from actions.chain_reads import ChainOutcome, ChainsUnavailable, chain_error
    from actions.evm_clients import ChainUnavailable

    chain, cause = get_chain(31337), requests.ConnectionError("connection refused")

    def refused(**kwargs):
        if reader == "card_for_user":
            raise ChainUnavailable(chain, cause)
        raise ChainsUnavailable([ChainOutcome(chain, None, chain_error(chain, cause), cause)])

    monkeypatch.setattr(views, reader, refused)
    token = make_token(user, application, scope=scope)
    response = client.get(path, HTTP_AUTHORIZATION=f"Bearer {token.token}")
    assert response.status_code == 503
    assert response.json() == {
        "detail": "The chain Gnosis (local) could not be read: connection refused",
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
