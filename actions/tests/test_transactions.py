"""get_transactions on the local chain: Transfer logs indexed into history entries merged with
our executed actions and Gnosis Pay card purchases; keyset pages that stay stable while new
transactions arrive (also truly concurrently, on PostgreSQL); sources that fail are reported."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import jsonschema
import pytest
from django.utils import timezone
from web3 import Web3

from actions.card.models import GnosisPaySession
from actions.card.state import gnosis_pay_session_store
from actions.contract import TRANSACTIONS_SCHEMA
from actions.execution.models import Action
from actions.execution.services import action_submit, actions_reconcile_pending
from actions.execution.signing import action_sign
from actions.history.models import HistoryEntry, TokenTransfer
from actions.history.services import history_sync
from chain import contracts
from chain.dev import mint
from core.chains import with_endpoints
from dev.demo.actions import provision_card
from dev.testing import wait_until

from .conftest import usdc_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db]
RECIPIENT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
DEV = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application, scope="read:transactions read:actions write:actions")


def history(api_client, token, **query) -> dict:
    response = api_client.get("/api/v1/transactions", token, query)
    assert response.status_code == 200, response.content
    body = response.json()
    jsonschema.validate(body, TRANSACTIONS_SCHEMA)
    return body


def sign_in(gnosis_pay, card) -> None:
    """What a card action's SIWE sign-in leaves behind: a Gnosis Pay JWT for the Safe."""
    gnosis_pay_session_store(
        safe_address=card.safe_address, token=gnosis_pay._jwt(card.safe_address)
    )


def eure_id() -> str:
    return f"eip155:31337/erc20:{contracts.demo_token_address('EURe')}"


def send_erc20(w3, symbol: str, to: str, units: int) -> str:
    """A plain ERC-20 transfer from the dev EOA (not one of our accounts)."""
    mint(w3, symbol, DEV, units)
    erc20 = w3.eth.contract(
        address=contracts.demo_token_address(symbol),
        abi=[
            {
                "type": "function",
                "name": "transfer",
                "stateMutability": "nonpayable",
                "inputs": [{"name": "to", "type": "address"}, {"name": "v", "type": "uint256"}],
                "outputs": [{"name": "", "type": "bool"}],
            }
        ],
    )
    tx = erc20.functions.transfer(Web3.to_checksum_address(to), units).transact({"from": DEV})
    w3.eth.wait_for_transaction_receipt(tx)
    return "0x" + bytes(tx).hex()


def execute_transfer(api_client, token, passkey, user, amount: str) -> Action:
    response = api_client.post(
        "/api/v1/actions/transfer",
        token,
        {"asset_id": usdc_id(), "amount": amount, "to": RECIPIENT},
    )
    assert response.status_code == 201, response.content
    action = Action.objects.get(pk=response.json()["action_id"])
    challenge = bytes.fromhex(action.user_op_hash[2:])
    action_sign(
        action_id=action.pk, user=user, credential_json=json.dumps(passkey.get_json(challenge))
    )
    action_submit(action_id=action.pk)
    wait_until(
        lambda: (
            actions_reconcile_pending() and Action.objects.get(pk=action.pk).status == "executed"
        ),
        timeout=60,
        interval=0.5,
    )
    return Action.objects.get(pk=action.pk)


def test_history_merges_chain_transfers_ramps_and_executed_actions(
    registered, user, api_client, token
):
    passkey, account, w3 = registered  # the fixture minted 10 USDC to the account
    mint(w3, "EURe", account.address, 5 * 10**18 + 1)  # Monerium mints EURe: an EUR on-ramp
    incoming = send_erc20(w3, "USDC", account.address, 2_500_000)
    action = execute_transfer(api_client, token, passkey, user, "1.5")

    body = history(api_client, token)
    assert body["sync"]["chain"]["error"] is None and body["nextCursor"] is None
    items = body["transactions"]
    assert [i["type"] for i in items] == ["transfer", "transfer", "ramp", "transfer"]
    sent = items[0]
    assert sent["actionId"] == str(action.pk) and sent["status"] == "confirmed"
    assert sent["receipts"] == [
        {"chainId": 31337, "caip2": "eip155:31337", "txHash": action.tx_hash.lower()}
    ]
    assert sent["flows"] == [
        {
            "direction": "out",
            "account": account.address.lower(),
            "counterparty": RECIPIENT.lower(),
            "assetId": usdc_id(),
            "symbol": "USDC",
            "formattedAmount": "1.5",
            "units": "1500000",
        }
    ]
    received = items[1]
    assert received["actionId"] is None and received["receipts"][0]["txHash"] == incoming
    assert received["flows"][0]["direction"] == "in"
    assert received["flows"][0]["counterparty"] == DEV.lower()
    assert received["flows"][0]["formattedAmount"] == "2.5"
    ramp = items[2]
    assert ramp["ramp"] == {
        "provider": "monerium",
        "direction": "onramp",
        "fiatCurrency": "EUR",
        "amount": "5.000000000000000001",
        "assetId": eure_id(),
    }
    assert items[3]["flows"][0]["formattedAmount"] == "10"  # the fixture's mint
    # get_balances agrees with the history: 10 + 2.5 - 1.5 USDC after the real transfer.
    from actions.tool_reads import balances_for_user

    usdc = next(
        b
        for b in balances_for_user(user=user)["balances"]
        if b["symbol"] == "USDC" and b["account"] == account.address and b["chainId"] == 31337
    )
    assert (usdc["amount"], usdc["units"]) == ("11", "11000000")
    # One entry per transaction, however many times the history is read.
    history(api_client, token)
    assert HistoryEntry.objects.filter(user=user).count() == 4
    assert TokenTransfer.objects.count() == 4


def test_pages_do_not_move_when_new_transactions_arrive_between_them(
    registered, user, api_client, token
):
    _, account, w3 = registered
    for units in range(1, 6):
        mint(w3, "USDC", account.address, units)
    first = history(api_client, token, limit=2)
    everything_then = [first["transactions"]]
    for units in (100, 200, 300):  # new transactions land and get indexed mid-walk
        mint(w3, "USDC", account.address, units)
    history_sync(user=user)
    cursor = first["nextCursor"]
    while cursor:
        page = history(api_client, token, limit=2, cursor=cursor)
        assert page["sync"] is None  # later pages only read
        everything_then.append(page["transactions"])
        cursor = page["nextCursor"]
    walked = [t["flows"][0]["units"] for page in everything_then for t in page]
    assert walked == ["5", "4", "3", "2", "1", "10000000"]  # the six there at the start, once
    fresh = history(api_client, token, limit=3)
    assert [t["flows"][0]["units"] for t in fresh["transactions"]] == ["300", "200", "100"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_paging_while_another_worker_indexes_concurrently(registered, user, api_client, token):
    _, account, w3 = registered
    for units in range(1, 9):
        mint(w3, "USDC", account.address, units)
    first = history(api_client, token, limit=3)
    expected = [str(u) for u in range(8, 0, -1)] + ["10000000"]
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(mints: bool) -> None:
        from django.db import connection

        try:
            units = 1000
            while not stop.is_set():
                if mints:  # one minter: the dev key's nonces are sequential
                    mint(w3, "USDC", account.address, units)
                    units += 1
                history_sync(user=user)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(m,)) for m in (True, False)]  # two indexers
    for t in threads:
        t.start()
    try:
        pages, cursor = [first["transactions"]], first["nextCursor"]
        while cursor:
            page = history(api_client, token, limit=3, cursor=cursor)
            pages.append(page["transactions"])
            cursor = page["nextCursor"]
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert [t["flows"][0]["units"] for page in pages for t in page] == expected
    # The racing indexers wrote each transaction once.
    hashes = list(HistoryEntry.objects.filter(user=user).values_list("tx_hash", flat=True))
    assert len(hashes) == len(set(hashes)) > len(expected)


def test_card_purchases_come_from_gnosis_pay_with_merchant_mcc_and_billing(
    registered, user, api_client, token, gnosis_pay
):
    _, account, w3 = registered
    card = provision_card(user=user, card_id="card-1", last4="4242")
    sign_in(gnosis_pay, card)
    gnosis_pay.add_purchase(
        card.safe_address,
        "card-1",
        merchant="Späti am Eck",
        mcc="5411",
        cents=1234,
        created_at="2026-11-30T10:00:00.000Z",
        pending=True,
        local_amount=1450,
        local_currency=("840", "USD", "$"),
    )
    refund_tx = send_erc20(w3, "EURe", card.safe_address, 5 * 10**18)  # settled on chain
    gnosis_pay.add_purchase(
        card.safe_address,
        "card-1",
        merchant="Bahn",
        mcc="4112",
        cents=500,
        created_at="2026-11-30T11:00:00.000Z",
        kind="Refund",
        tx_hash=refund_tx,
    )
    body = history(api_client, token)
    assert body["sync"]["gnosisPay"]["error"] is None
    purchases = [t for t in body["transactions"] if t["type"] == "cardPurchase"]
    assert len(purchases) == 2
    refund = next(p for p in purchases if p["cardPurchase"]["kind"] == "Refund")
    # Indexed from the chain and reported by Gnosis Pay: one line, flows from the chain.
    assert refund["receipts"] == [{"chainId": 31337, "caip2": "eip155:31337", "txHash": refund_tx}]
    assert refund["flows"][0]["direction"] == "in"
    assert refund["flows"][0]["account"] == card.safe_address.lower()
    assert refund["flows"][0]["formattedAmount"] == "5"
    payment = next(p for p in purchases if p["cardPurchase"]["kind"] == "Payment")
    assert payment["status"] == "pending" and payment["receipts"] == []
    assert payment["cardPurchase"] == {
        "cardId": "card-1",
        "last4": "4242",
        "kind": "Payment",
        "status": "Approved",
        "isPending": True,
        "clearedAt": None,
        "merchant": {"name": "Späti am Eck", "city": "Berlin", "country": "DE"},
        "mcc": "5411",
        "billingAmount": "12.34",
        "billingCurrency": {"code": "978", "symbol": "€", "name": "Euro"},
        "transactionAmount": "14.5",
        "transactionCurrency": {"code": "840", "symbol": "$", "name": "USD"},
        "transactionType": "00",
    }
    # Not settled yet: its flow is the billing amount in the card's token.
    assert payment["flows"] == [
        {
            "direction": "out",
            "account": card.safe_address.lower(),
            "counterparty": None,
            "assetId": eure_id(),
            "symbol": "EURe",
            "formattedAmount": "12.34",
            "units": None,
        }
    ]
    assert HistoryEntry.objects.filter(user=user, kind="cardPurchase").count() == 2

    # The session lapses: what was synced stays, and the answer says why nothing new came.
    GnosisPaySession.objects.filter(safe_address=card.safe_address.lower()).delete()
    again = history(api_client, token)
    assert "no Gnosis Pay session" in again["sync"]["gnosisPay"]["error"]
    assert len([t for t in again["transactions"] if t["type"] == "cardPurchase"]) == 2


def test_a_chain_that_cannot_be_read_is_reported_and_the_index_still_served(
    registered, user, api_client, token, settings
):
    history(api_client, token)
    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, rpc_url="http://127.0.0.1:9"
    )  # nothing listens there
    body = history(api_client, token)
    assert body["sync"]["chain"]["error"].startswith("The chain Gnosis (local) could not be read")
    assert len(body["transactions"]) == 1  # the fixture's mint, indexed before


def test_another_users_history_is_invisible_even_with_their_cursor(
    registered, user, other_user, api_client, token, application, make_token
):
    _, account, w3 = registered
    mint(w3, "USDC", account.address, 7)
    mine = history(api_client, token, limit=1)
    theirs = make_token(other_user, application, scope="read:transactions")
    assert history(api_client, theirs)["transactions"] == []
    assert history(api_client, theirs, cursor=mine["nextCursor"])["transactions"] == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"limit": "²"}, "limit"),  # a Unicode digit int() refuses
        ({"cursor": "garbage!"}, "cursor"),
        ({"cursor": "eyJ0IjogWzFdLCAiaWQiOiAxfQ"}, "cursor"),  # {"t": [1], "id": 1}
    ],
)
def test_bad_paging_input_is_a_clear_400(registered, api_client, token, query, field):
    response = api_client.get("/api/v1/transactions", token, query)
    assert response.status_code == 400 and field in response.json()["errors"]


def test_transactions_need_their_scope(registered, user, api_client, application, make_token):
    wrong = make_token(user, application, scope="read:balances")
    response = api_client.get("/api/v1/transactions", wrong)
    assert response.status_code == 403


def _user_op(w3, passkey, account, calls) -> str:
    """Run calls from the passkey account as one real user operation; its tx hash."""
    from actions.evm_clients import bundler_client
    from actions.tool_requests.checks import passkey_client
    from evm.userops import to_rpc, user_op_hash

    client = passkey_client(w3, account)
    bundler = bundler_client(31337)
    op = client.build(client.execute_batch(calls), bundler)
    op_hash = user_op_hash(
        op, entry_point=client.entry_point, chain_id=w3.eth.chain_id, version=client.version
    )
    bundler.send_user_operation(to_rpc(client.sign_with(passkey, op, op_hash)), client.entry_point)
    receipt = wait_until(lambda: bundler.get_user_operation_receipt(op_hash), timeout=60)
    assert receipt.success
    return receipt.tx_hash.lower()


def test_vault_deposits_and_withdrawals_are_investments(
    registered, user, api_client, token, settings
):
    from actions.tool_reads import balances_for_user
    from dev.providers.local_coingecko import LocalCoinGeckoServer

    passkey, account, w3 = registered
    usdc = w3.eth.contract(
        address=contracts.demo_token_address("USDC"),
        abi=contracts.build_artifact("DemoToken")["abi"],
    )
    vault = w3.eth.contract(
        address=contracts.demo_vault_address("svUSDC"),
        abi=contracts.build_artifact("DemoVault")["abi"],
    )
    me = Web3.to_checksum_address(account.address)
    approve = usdc.encode_abi("approve", [vault.address, 4_000_000])
    deposit = vault.encode_abi("deposit", [4_000_000, me])
    deposit_tx = _user_op(
        w3,
        passkey,
        account,
        [
            (usdc.address, 0, Web3.to_bytes(hexstr=approve)),
            (vault.address, 0, Web3.to_bytes(hexstr=deposit)),
        ],
    )
    redeem = vault.encode_abi("redeem", [1_000_000, me, me])
    redeem_tx = _user_op(w3, passkey, account, [(vault.address, 0, Web3.to_bytes(hexstr=redeem))])

    items = history(api_client, token)["transactions"]
    withdraw, invest = items[0], items[1]
    assert [withdraw["receipts"][0]["txHash"], invest["receipts"][0]["txHash"]] == [
        redeem_tx,
        deposit_tx,
    ]
    share_id = f"eip155:31337/erc20:{vault.address}"
    assert invest["type"] == "investment" and invest["investment"] == {
        "direction": "deposit",
        "vault": vault.address,
        "vaultAssetId": share_id,
        "shares": "4",
        "assetId": usdc_id(),
        "assets": "4",
    }
    assert {(f["direction"], f["symbol"]) for f in invest["flows"]} == {
        ("out", "USDC"),
        ("in", "svUSDC"),
    }
    assert withdraw["investment"]["direction"] == "withdraw"
    assert (withdraw["investment"]["shares"], withdraw["investment"]["assets"]) == ("1", "1")

    # get_balances values the shares through the vault (convertToAssets) at USDC's price.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}}
    with LocalCoinGeckoServer() as prices:
        settings.PRICE_API_URL = prices.url
        shares = next(
            b
            for b in balances_for_user(user=user)["balances"]
            if b["symbol"] == "svUSDC" and b["chainId"] == 31337
        )
    assert shares["amount"] == "3" and shares["fiat"] == {
        "USD": "3.00",
        "EUR": "2.76",
        "BRL": "15.90",
    }


def test_support_staff_read_the_history_in_the_admin(
    registered, user, staff_user, client, api_client, token
):
    history(api_client, token)
    entry = HistoryEntry.objects.get(user=user)
    client.force_login(staff_user)
    for model in ("historyentry", "tokentransfer", "cardpurchase"):
        assert client.get(f"/admin/actions/{model}/").status_code == 200
        assert client.get(f"/admin/actions/{model}/add/").status_code == 403
    page = client.get(f"/admin/actions/historyentry/{entry.pk}/change/")
    assert page.status_code == 200 and entry.tx_hash.encode() in page.content


def test_an_e_money_burn_is_an_offramp(user, settings):
    from django.utils import timezone

    from actions.accounts.models import SmartAccount, Token
    from actions.history.services import ZERO_ADDRESS, _classify
    from actions.presenters import transactions_page
    from dev.demo.actions import ensure_demo_tokens

    ensure_demo_tokens()
    account = SmartAccount.objects.create(
        user=user, kind="picnic", chain_id=31337, address="0x" + "ab" * 20, owner="eoa:x"
    )
    burn = TokenTransfer.objects.create(
        chain_id=31337,
        tx_hash="0x" + "01" * 32,
        log_index=0,
        block_number=5,
        block_time=timezone.now(),
        token=Token.objects.get(symbol="EURe", chain_id=31337),
        from_address=account.address,
        to_address=ZERO_ADDRESS,
        units=str(2 * 10**18),
    )
    assert _classify([burn]) == "ramp"
    HistoryEntry.objects.create(
        user=user, occurred_at=burn.block_time, kind="ramp", chain_id=31337, tx_hash=burn.tx_hash
    )
    line = transactions_page(user=user)["transactions"][0]
    assert line["ramp"] == {
        "provider": "monerium",
        "direction": "offramp",
        "fiatCurrency": "EUR",
        "amount": "2",
        "assetId": eure_id(),
    }


def test_an_unreadable_card_transaction_is_reported_and_the_rest_kept(
    user, api_client, token, chain_settings, gnosis_pay
):
    from actions.card.models import Card

    card = Card.objects.create(
        user=user, card_id="card-9", last4="9999", safe_address=DEV, chain_id=31337
    )
    sign_in(gnosis_pay, card)
    good = dict(merchant="Bakery", mcc="5462", cents=250, created_at="2026-11-01T08:00:00Z")
    gnosis_pay.add_purchase(card.safe_address, "card-9", **good)
    bad = gnosis_pay.add_purchase(card.safe_address, "card-9", **good)
    bad["billingAmount"] = "twelve"
    body = history(api_client, token)
    assert f"unreadable card transaction '{bad['threadId']}'" in body["sync"]["gnosisPay"]["error"]
    assert [t["cardPurchase"]["billingAmount"] for t in body["transactions"]] == ["2.5"]


def test_the_beat_task_keeps_purchases_while_a_session_lasts(user, other_user, gnosis_pay):
    from actions.card.models import Card
    from actions.history.models import CardPurchase
    from actions.tasks import card_purchases_sync_signed_in_task

    signed_in = Card.objects.create(
        user=user, card_id="card-a", last4="1111", safe_address=DEV, chain_id=31337
    )
    lapsed = Card.objects.create(  # its session expired: not asked, and forgotten
        user=other_user, card_id="card-b", last4="2222", safe_address=RECIPIENT, chain_id=31337
    )
    gnosis_pay_session_store(
        safe_address=lapsed.safe_address,
        token="x.e30.y",  # no exp claim: 50 minutes from `now`
        now=timezone.now() - timedelta(hours=1),
    )
    sign_in(gnosis_pay, signed_in)
    gnosis_pay.add_purchase(
        DEV, "card-a", merchant="Kiosk", mcc="5994", cents=300, created_at="2026-11-02T09:00:00Z"
    )
    assert card_purchases_sync_signed_in_task() == 1
    purchase = CardPurchase.objects.get()
    assert (purchase.card, purchase.mcc, purchase.billing_amount) == (signed_in, "5994", 300)
    assert HistoryEntry.objects.get(card_purchase=purchase).user == user
    assert list(GnosisPaySession.objects.values_list("safe_address", flat=True)) == [DEV.lower()]


def test_purchases_settled_together_or_later_keep_one_line_each(
    user, api_client, token, gnosis_pay
):
    from actions.card.models import Card

    card = Card.objects.create(
        user=user, card_id="card-7", last4="7777", safe_address=DEV, chain_id=31337
    )
    sign_in(gnosis_pay, card)
    batch = "0x" + "aa" * 32  # Gnosis Pay settled two purchases in one transaction
    common = dict(mcc="5812", cents=900, created_at="2026-11-03T12:00:00Z", tx_hash=batch)
    gnosis_pay.add_purchase(DEV, "card-7", merchant="Café", **common)
    gnosis_pay.add_purchase(DEV, "card-7", merchant="Kino", **common)
    later = gnosis_pay.add_purchase(
        DEV,
        "card-7",
        merchant="Bar",
        mcc="5813",
        cents=400,
        created_at="2026-11-03T13:00:00Z",
        pending=True,
    )
    lines = history(api_client, token)["transactions"]
    assert sorted(t["cardPurchase"]["merchant"]["name"] for t in lines) == ["Bar", "Café", "Kino"]
    for line in lines:
        if line["cardPurchase"]["merchant"]["name"] != "Bar":
            assert line["receipts"] == [
                {"chainId": 31337, "caip2": "eip155:31337", "txHash": batch}
            ]
    # The pending one settles: the same line now carries its settlement.
    later.update(
        isPending=False, transactions=[{"status": "ExecSuccess", "hash": "0x" + "bb" * 32}]
    )
    bar = next(
        t
        for t in history(api_client, token)["transactions"]
        if t["cardPurchase"]["merchant"]["name"] == "Bar"
    )
    assert bar["status"] == "confirmed" and bar["receipts"][0]["txHash"] == "0x" + "bb" * 32
    assert HistoryEntry.objects.filter(user=user).count() == 3
