"""Two chains on the real local world (31337 "Gnosis (local)", the card's, and 31338 "Base
(local)"): the passkey account on both at one address, a transfer on the L2 through the L2's
bundler, reads across both chains (one batch per chain, the chains in parallel), and a chain
that is down: named in a per-chain error while the other chain's data is served, and named in
a write tool's 503 while the other chain keeps taking proposals."""

from __future__ import annotations

import json
import threading

import jsonschema
import pytest
import requests
from django.db import connection
from django.test.utils import CaptureQueriesContext
from web3 import Web3

from actions.accounts.models import SmartAccount
from actions.contract import BALANCES_SCHEMA, SMART_ACCOUNTS_SCHEMA, TRANSACTIONS_SCHEMA
from actions.execution.models import Action
from actions.execution.services import action_reconcile, action_submit
from actions.execution.signing import action_sign
from actions.history.models import HistoryEntry
from chain import contracts
from chain.dev import fund, mint, token_balance
from chain.stack import free_port
from core.chains import with_endpoints
from core.lifecycle import Actor
from dev.local_server import LocalJsonServer
from dev.testing import ScriptedServer, wait_until

pytestmark = [pytest.mark.chain, pytest.mark.django_db]
RECIPIENT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
SCOPES = "read:balances read:accounts read:transactions read:actions write:actions"


def usdc(chain_id: int) -> str:
    return f"eip155:{chain_id}/erc20:{contracts.demo_token_address('USDC')}"


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application, scope=SCOPES)


@pytest.fixture
def on_both(registered, l2_chain):
    """The registered user's account, funded on the L2 too (the fixture funds the card's
    chain): 2 ETH for gas and 7 USDC there."""
    passkey, account, w3 = registered
    l2 = Web3(Web3.HTTPProvider(l2_chain.rpc_url))
    fund(l2, account.address, Web3.to_wei(1, "ether"))
    mint(l2, "USDC", account.address, 7_000_000)
    return passkey, account, w3, l2


def _balances(api_client, token) -> dict:
    response = api_client.get("/api/v1/balances", token)
    assert response.status_code == 200, response.content
    body = response.json()
    jsonschema.validate(body, BALANCES_SCHEMA)
    return body


def _usdc_by_chain(body: dict) -> dict[int, str]:
    return {b["chainId"]: b["amount"] for b in body["balances"] if b["symbol"] == "USDC"}


def test_the_passkey_account_is_registered_on_every_chain_at_one_address(
    registered, user, api_client, token
):
    account = registered[1]
    rows = SmartAccount.objects.filter(user=user, passkey__isnull=False).order_by("chain_id")
    assert [(r.chain_id, r.address) for r in rows] == [
        (31337, account.address),
        (31338, account.address),
    ]
    body = api_client.get("/api/v1/smart-accounts", token).json()
    jsonschema.validate(body, SMART_ACCOUNTS_SCHEMA)
    assert [(a["chainId"], a["caip2"], a["accountId"]) for a in body["smartAccounts"]] == [
        (31337, "eip155:31337", f"eip155:31337:{account.address}"),
        (31338, "eip155:31338", f"eip155:31338:{account.address}"),
    ]


def test_a_chain_added_to_the_table_later_gets_the_account_on_first_read(
    registered, user, api_client, token, settings
):
    account = registered[1]
    SmartAccount.objects.filter(user=user, chain_id=31338).delete()  # registered before it
    api_client.get("/api/v1/smart-accounts", token)
    assert SmartAccount.objects.filter(
        user=user, chain_id=31338, address=account.address, passkey=account.passkey
    ).exists()


def test_balances_cover_both_chains_with_their_caip_ids(on_both, api_client, token):
    body = _balances(api_client, token)
    assert _usdc_by_chain(body) == {31337: "10", 31338: "7"}
    for item in body["balances"]:
        assert item["caip2"] == f"eip155:{item['chainId']}"
        assert item["assetId"].startswith(item["caip2"] + "/erc20:")
    assert body["chains"] == [
        {"chainId": 31337, "caip2": "eip155:31337", "name": "Gnosis (local)", "error": None},
        {"chainId": 31338, "caip2": "eip155:31338", "name": "Base (local)", "error": None},
    ]


class NodeProxy(LocalJsonServer):
    """A forwarder in front of a real node that records each request's JSON-RPC batch size
    and, when `together` is a barrier, forwards nothing until every proxy sharing it has
    received its request (so a reader that waits for one chain's answer before asking the
    next never gets one). `close_after` closes each kept-alive connection after its answer,
    without saying so (as a node's idle timeout does)."""

    def __init__(self, target: str, together: threading.Barrier | None = None) -> None:
        super().__init__()
        self.target, self.together, self.close_after = target, together, False
        self.batches: list[int] = []

    def on_post(self, handler) -> None:
        body = self.read_body(handler)
        request = json.loads(body)
        self.batches.append(len(request) if isinstance(request, list) else 0)
        if self.together is not None:
            try:
                self.together.wait()
            except threading.BrokenBarrierError:
                return self.send(handler, 502, b'{"message": "asked one after the other"}')
        answer = requests.post(self.target, data=body, timeout=30)
        self.send(handler, answer.status_code, answer.content)
        handler.close_connection = self.close_after


def test_balances_are_one_batch_per_chain_all_sent_before_any_answer(
    on_both, user, l2_chain, chain, settings
):
    """Each chain's node gets exactly one HTTP request (a JSON-RPC batch), and neither
    node answers until both have been asked: the reads wait side by side, from one thread."""
    from actions.chain_reads import _read_pool
    from actions.tool_reads import balances_for_user

    together = threading.Barrier(2, timeout=10)
    settings.CHAIN_READ_TIMEOUT_SECONDS = 20
    with NodeProxy(chain.rpc_url, together) as card, NodeProxy(l2_chain.rpc_url, together) as l2:
        settings.CHAINS = with_endpoints(31337, rpc_url=card.url)
        settings.CHAINS = with_endpoints(31338, rpc_url=l2.url)
        pool_threads = _read_pool()._threads.copy()
        body = balances_for_user(user=user)
    assert [c["error"] for c in body["chains"]] == [None, None]
    assert (card.batches, l2.batches) == ([1], [1])  # one eth_call: USDC, EURe, svUSDC, share price
    assert _usdc_by_chain(body) == {31337: "10", 31338: "7"}
    assert _read_pool()._threads == pool_threads  # no read thread started for this


def test_a_second_chain_adds_no_database_query(on_both, api_client, token, settings, chain):
    """The accounts and tokens of every chain come from the same queries: the whole
    GET /api/v1/balances (token check, accounts, tokens) asks the database as often for two
    chains as for one."""
    both = settings.CHAINS
    queries = {}
    for name, table in (("one", tuple(c for c in both if c.id == 31337)), ("two", both)):
        settings.CHAINS = table
        _balances(api_client, token)  # a chain added since registration: rows made on first read
        with CaptureQueriesContext(connection) as captured:
            body = _balances(api_client, token)
        assert {c["chainId"] for c in body["chains"]} == {c.id for c in table}
        queries[name] = [q["sql"].split(" FROM ")[1].split()[0] for q in captured.captured_queries]
    assert queries["two"] == queries["one"]
    # The token; the accounts (the check for a chain added since registration, then the passkey
    # accounts and the Safes they own); the tokens.
    assert len(queries["one"]) == 5, queries["one"]


def test_a_node_that_closes_its_kept_connections_is_asked_again_on_a_fresh_one(
    on_both, user, l2_chain, chain, settings
):
    from actions.tool_reads import balances_for_user

    with NodeProxy(chain.rpc_url) as card:
        card.close_after = True
        settings.CHAINS = with_endpoints(31337, rpc_url=card.url)
        for _ in range(3):
            body = balances_for_user(user=user)
            assert [c["error"] for c in body["chains"]] == [None, None]
            assert _usdc_by_chain(body) == {31337: "10", 31338: "7"}
    assert card.batches == [1, 1, 1]


def test_a_transfer_on_the_l2_goes_through_the_l2_bundler(
    on_both, user, api_client, token, chain, l2_chain
):
    passkey, account, w3, l2 = on_both
    response = api_client.post(
        "/api/v1/actions/transfer", token, {"asset_id": usdc(31338), "amount": "2", "to": RECIPIENT}
    )
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["action_id"])
    assert action.chain_id == 31338 and action.smart_account == account.address
    challenge = bytes.fromhex(action.user_op_hash[2:])
    action_sign(
        action_id=action.pk, user=user, credential_json=json.dumps(passkey.get_json(challenge))
    )
    action_submit(action_id=action.pk)
    wait_until(
        lambda: action_reconcile(action_id=action.pk, actor=Actor.worker()) == "executed",
        timeout=60,
        interval=0.5,
    )
    action.refresh_from_db()
    # Mined on the L2 (its receipt is there, not on the card's chain), tokens moved there only.
    assert l2.eth.get_transaction_receipt(action.tx_hash)["status"] == 1
    assert token_balance(l2, "USDC", RECIPIENT) == 2_000_000
    assert token_balance(l2, "USDC", account.address) == 5_000_000
    assert token_balance(w3, "USDC", account.address) == 10_000_000
    assert l2.eth.get_code(account.address) != b""  # deployed on the L2 by this first op
    assert w3.eth.get_code(account.address) == b""  # still counterfactual on the card's chain
    assert _usdc_by_chain(_balances(api_client, token)) == {31337: "10", 31338: "5"}


def test_an_l2_that_is_down_is_named_and_the_card_chain_keeps_working(
    on_both, user, api_client, token, settings
):
    """A refused port, a node that hangs, one that drops the connection and one that answers
    garbage: all bounded, all named."""
    settings.CHAIN_READ_TIMEOUT_SECONDS = 1
    with ScriptedServer() as failing:
        for url, mode, reason in (
            (f"http://127.0.0.1:{free_port()}", "result", "refused"),
            (failing.url, "hang", "timed out"),
            (failing.url, "drop", "connection"),
            (failing.url, "garbage", "Expecting value"),
        ):
            failing.mode = mode
            settings.CHAINS = with_endpoints(31338, rpc_url=url, bundler_url=url)
            body = _balances(api_client, token)
            assert _usdc_by_chain(body) == {31337: "10"}  # the card chain's data, as it is
            card, l2 = body["chains"]
            assert card["error"] is None
            assert l2["name"] == "Base (local)" and l2["chainId"] == 31338
            assert l2["error"].startswith("The chain Base (local) could not be read: ")
            assert reason in l2["error"] and "127.0.0.1" not in l2["error"]

            # Writes: the L2 transfer is refused naming the chain, the card chain's goes on.
            before, asked = Action.objects.count(), len(failing.requests)
            response = api_client.post(
                "/api/v1/actions/transfer",
                token,
                {"asset_id": usdc(31338), "amount": "1", "to": RECIPIENT},
            )
            assert response.status_code == 503, response.content
            if mode == "hang":  # asked once: a call that timed out is not retried (web3 would)
                assert len(failing.requests) == asked + 1, failing.requests[asked:]
            assert response.json()["code"] == "chain_unavailable"
            assert response.json()["detail"].startswith("The chain Base (local) could not be read")
            assert Action.objects.count() == before
            response = api_client.post(
                "/api/v1/actions/transfer",
                token,
                {"asset_id": usdc(31337), "amount": "1", "to": RECIPIENT},
            )
            assert response.status_code == 201, response.content


def test_balances_and_history_with_the_l2_node_really_stopped(
    registered, user, api_client, token, own_l2
):
    """A second L2 stack of our own, read while up, then its node process stopped."""
    passkey, account, w3 = registered
    l2 = own_l2
    try:
        l2_w3 = Web3(Web3.HTTPProvider(l2.rpc_url))
        mint(l2_w3, "USDC", account.address, 3_000_000)
        assert _usdc_by_chain(_balances(api_client, token)) == {31337: "10", 31338: "3"}
        body = api_client.get("/api/v1/transactions", token).json()
        jsonschema.validate(body, TRANSACTIONS_SCHEMA)
        assert [c["error"] for c in body["sync"]["chains"]] == [None, None]
        assert HistoryEntry.objects.filter(user=user, chain_id=31338).count() == 1  # the mint
    finally:
        l2.stop()  # the node and bundler processes are gone: nothing listens there any more

    mint(w3, "USDC", account.address, 1_000_000)  # the card chain moves on meanwhile
    body = _balances(api_client, token)
    assert _usdc_by_chain(body) == {31337: "11"}
    assert (
        body["chains"][1]["error"] == "The chain Base (local) could not be read: connection refused"
    )
    body = api_client.get("/api/v1/transactions", token).json()
    jsonschema.validate(body, TRANSACTIONS_SCHEMA)
    card, base = body["sync"]["chains"]
    assert card["error"] is None and card["syncedToBlock"] is not None
    assert base["error"] == "The chain Base (local) could not be read: connection refused"
    assert base["syncedToBlock"] is None
    assert body["sync"]["chain"] == {
        "chainId": 31337,
        "syncedToBlock": card["syncedToBlock"],
        "error": None,
    }
    # The L2's history indexed while it was up is still served; the card chain's new mint too.
    chains_seen = {r["chainId"] for t in body["transactions"] for r in t["receipts"]}
    assert chains_seen == {31337, 31338}
