"""Cross-chain swaps without a chain: the local LI.FI server's bridge quotes, its /status
vocabulary and fault modes, and our side's destination leg (reconciliation with backoff, the
status history, the console's list of waiting bridges, quote expiry at signing, the pages).

The demo tokens sit at made-up addresses here (their real CREATE2 addresses need the compiled
contracts); a chain that must be "down" is a closed loopback port. The same paths against the
two real local chains are in test_bridge_chain.py."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest
from django.db.models import F
from django.utils import timezone
from eth_abi import decode

from actions.accounts.passkeys import PasskeyError
from actions.bridges.mail import bridge_leg_mail
from actions.bridges.models import BridgeLeg
from actions.bridges.services import bridge_reconcile, bridges_reconcile_pending, leg_detail
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.selectors import action_with_history
from actions.execution.signing import action_sign
from actions.presenters import action_status_payload
from actions.providers.lifi import LifiClient, ProviderUnavailable, QuoteError
from actions.tests.factories import made_up_address, make_action
from chain import contracts
from chain.stack import free_port
from console.selectors import Filters, needs_attention
from core.lifecycle import Actor, transition
from dev.providers.local_lifi import TRANSFER, TRANSFER_TOPIC, LocalLifiServer
from dev.testing import plan_nodes

CARD, L2 = 31337, 31338
ACCOUNT = "0x" + "ab" * 20
TX = "0x" + "5e" * 32


@pytest.fixture
def tokens(monkeypatch):
    monkeypatch.setattr(contracts, "demo_token_address", made_up_address)


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def bridge(tokens, settings):
    """The local server with both chains "down" (closed ports): quotes and /status work, a
    delivery cannot happen. No watcher thread: tests drive `tick()` themselves."""
    server = LocalLifiServer(rpc_urls={CARD: dead_url(), L2: dead_url()}, bridge_delay=0)
    with LocalJsonOnly(server):
        settings.SWAP_QUOTE_URL = server.url
        settings.SWAP_QUOTE_TIMEOUT_SECONDS = 1.0
        settings.BRIDGE_POLL_SECONDS = 5.0
        settings.BRIDGE_POLL_MAX_SECONDS = 300.0
        yield server


class LocalJsonOnly:
    """Serve HTTP only (the watcher stays off: each test ticks the bridge when it wants)."""

    def __init__(self, server: LocalLifiServer):
        self.server = server

    def __enter__(self) -> LocalLifiServer:
        self.server._thread.start()
        return self.server

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def quote(server, *, amount=10_000_000, from_chain=CARD, to_chain=L2, to="EURe", **extra):
    return LifiClient(server.url, timeout=2).quote(
        from_chain=from_chain,
        to_chain=to_chain,
        from_token=made_up_address("USDC"),
        to_token=made_up_address(to),
        from_amount=amount,
        from_address=ACCOUNT,
        slippage_percent=Decimal("0.5"),
        **extra,
    )


def source_log(server, *, amount=10_000_000, tx=TX, sender=ACCOUNT) -> dict:
    """A Transfer log of the source transaction, as eth_getLogs returns it."""
    return {
        "address": made_up_address("USDC"),
        "topics": [
            TRANSFER_TOPIC,
            "0x" + "00" * 12 + sender[2:],
            "0x" + "00" * 12 + server.escrow.lower()[2:],
        ],
        "data": "0x" + amount.to_bytes(32, "big").hex(),
        "transactionHash": tx,
    }


def status(server, tx=TX):
    return LifiClient(server.url, timeout=2).status(
        tx_hash=tx, from_chain=CARD, to_chain=L2, bridge="demo-bridge"
    )


# --- the local LI.FI server -------------------------------------------------------------------


def test_a_cross_chain_quote_is_a_bridge_deposit_in_lifis_shape(bridge):
    q = quote(bridge)
    assert (q.from_chain_id, q.to_chain_id, q.tx_chain_id, q.tool) == (
        CARD,
        L2,
        CARD,
        "demo-bridge",
    )
    # 10 USDC = 9.2 EURe at the demo rate, less the bridge's 0.6%, less 0.5% slippage at worst.
    assert q.to_amount == 9_144_800_000_000_000_000
    assert q.to_amount_min == int(Decimal(q.to_amount) * Decimal("0.995"))
    assert q.to_token["chainId"] == L2 and q.to_token["symbol"] == "EURe"
    # The source transaction sends the tokens to the escrow: no allowance to give.
    assert int(q.approval_address, 16) == 0
    assert q.tx_to == made_up_address("USDC")
    data = bytes.fromhex(q.tx_data[2:])
    assert data[:4] == TRANSFER
    assert decode(["address", "uint256"], data[4:]) == (bridge.escrow.lower(), 10_000_000)
    assert q.raw["includedSteps"][0]["type"] == "cross"
    assert q.raw["estimate"]["executionDuration"] >= 1


def test_no_quote_for_a_chain_the_bridge_does_not_serve(bridge):
    with pytest.raises(QuoteError, match="No available quotes") as refused:
        quote(bridge, to_chain=100)
    assert not isinstance(refused.value, ProviderUnavailable)


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("unavailable", "Service temporarily unavailable (HTTP 503)"),
        ("error", "Internal server error (HTTP 500)"),
        ("hang", "no answer within"),
        ("drop", "connection lost"),
    ],
)
def test_an_outage_is_provider_unavailable_for_quotes_and_status(bridge, mode, message):
    bridge.mode = mode
    client = LifiClient(bridge.url, timeout=1)
    with pytest.raises(ProviderUnavailable, match=re.escape(message)):
        quote(bridge)
    with pytest.raises(ProviderUnavailable, match=re.escape(message)):
        client.status(tx_hash=TX, from_chain=CARD, to_chain=L2)


def test_the_admin_endpoint_sets_the_faults(bridge):
    def post(body: dict) -> tuple[int, dict]:
        request = Request(
            f"{bridge.url}/admin/faults", data=json.dumps(body).encode(), method="POST"
        )
        try:
            with urlopen(request, timeout=2) as answer:
                return answer.status, json.loads(answer.read())
        except HTTPError as exc:  # it carries the 400 body
            return exc.code, json.loads(exc.read())

    code, body = post({"bridge_mode": "refund", "bridge_delay": 2})
    assert code == 200 and body["bridge_mode"] == "refund" and body["bridge_delay"] == 2.0
    assert bridge.bridge_mode == "refund"
    code, body = post({"bridge_mode": "maybe"})
    assert code == 400 and "bridge_mode must be one of" in body["message"]
    assert post({"mode": "unavailable"})[0] == 200
    with pytest.raises(ProviderUnavailable):
        quote(bridge)


def test_status_says_not_found_for_an_unknown_hash_and_refuses_a_malformed_one(bridge):
    answer = status(bridge)
    assert (answer.status, answer.final) == ("NOT_FOUND", False)
    with pytest.raises(QuoteError, match="no bridge status: Invalid transaction hash"):
        status(bridge, tx="0x1234")


def test_the_status_vocabulary_from_pending_to_each_ending(bridge):
    # A transfer to the escrow that matches no quote is not a bridge transfer.
    bridge._scan_logs(CARD, [source_log(bridge, amount=1)])
    assert status(bridge).status == "NOT_FOUND"

    q = quote(bridge)
    bridge.bridge_mode = "never"
    bridge._scan_logs(CARD, [source_log(bridge)])
    bridge.tick()
    answer = status(bridge)
    assert (answer.status, answer.substatus) == ("PENDING", "WAIT_DESTINATION_TRANSACTION")
    assert answer.sending_tx_hash == TX and answer.receiving_tx_hash == ""
    assert answer.raw["transactionId"] == q.id and answer.raw["tool"] == "demo-bridge"
    assert answer.raw["sending"]["amount"] == "10000000"
    assert answer.raw["sending"]["chainId"] == CARD and answer.raw["receiving"] == {"chainId": L2}

    # Paused: the bridge itself is not available; it carries on when the mode changes.
    second = "0x" + "5f" * 32
    quote(bridge, amount=20_000_000)
    bridge.bridge_mode = "paused"
    bridge._scan_logs(CARD, [source_log(bridge, amount=20_000_000, tx=second)])
    bridge.tick()
    assert status(bridge, second).substatus == "BRIDGE_NOT_AVAILABLE"

    # The destination chain is down: complete/partial/refund wait for it, and say so.
    bridge.bridge_mode = "complete"
    bridge.tick()
    answer = status(bridge, second)
    assert (answer.status, answer.substatus) == ("PENDING", "CHAIN_NOT_AVAILABLE")

    # Fail ends it: FAILED, nothing received.
    third = "0x" + "60" * 32
    quote(bridge, amount=30_000_000)
    bridge.bridge_mode = "fail"
    bridge._scan_logs(CARD, [source_log(bridge, amount=30_000_000, tx=third)])
    bridge.tick()
    answer = status(bridge, third)
    assert (answer.status, answer.substatus, answer.final) == (
        "FAILED",
        "NOT_PROCESSABLE_REFUND_NEEDED",
        True,
    )
    # A quote is used once: the same amount again matches nothing.
    fourth = "0x" + "61" * 32
    bridge._scan_logs(CARD, [source_log(bridge, amount=30_000_000, tx=fourth)])
    assert status(bridge, fourth).status == "NOT_FOUND"


# --- our side: the destination leg ------------------------------------------------------------


def executed_bridge_swap(user, application, *, minutes_ago: float = 0) -> Action:
    executed_at = timezone.now() - timedelta(minutes=minutes_ago)
    action = make_action(
        user=user,
        application=application,
        type="swap",
        summary="Swap 10 USDC on Gnosis (local) for at least 9.09 EURe on Base (local)",
        smart_account=ACCOUNT,
        params={
            "from_asset_id": f"eip155:{CARD}/erc20:{made_up_address('USDC')}",
            "to_asset_id": f"eip155:{L2}/erc20:{made_up_address('EURe')}",
            "amount": "10",
            "symbol": "USDC",
            "to_symbol": "EURe",
            "to_amount": "9.1448",
            "to_amount_min": "9.099",
            "slippage": "0.5",
            "provider": "demo-bridge",
            "cross_chain": True,
            "to_chain_id": L2,
        },
    )
    BridgeLeg.objects.create(
        action=action,
        from_chain_id=CARD,
        to_chain_id=L2,
        tool="demo-bridge",
        to_asset_id=action.params["to_asset_id"],
        to_symbol="EURe",
    )
    for to in ("signed", "submitted", "broadcast"):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=to, actor=Actor.worker())
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to="executed",
        actor=Actor.worker(),
        detail=f"included in block 7, tx {TX}",
        updates={"tx_hash": TX, "block_number": 7},
    )
    Action.objects.filter(pk=action.pk).update(executed_at=executed_at)
    return Action.objects.get(pk=action.pk)


def leg_rows(action: Action) -> list[str]:
    return [
        row["detail"]
        for row in action_status_payload(action_with_history(action_id=action.pk))["status_history"]
        if row["detail"] and row["detail"].startswith("destination leg: ")
    ]


@pytest.mark.django_db
def test_the_leg_is_polled_with_backoff_and_each_change_is_in_the_status_history(
    bridge, user, application
):
    action = executed_bridge_swap(user, application)
    quote(bridge)
    bridge.bridge_mode = "complete"
    bridge._scan_logs(CARD, [source_log(bridge)])
    bridge.tick()  # the destination chain is down

    assert bridges_reconcile_pending() == {"PENDING": 1}
    leg = BridgeLeg.objects.get(action=action)
    assert (leg.status, leg.substatus, leg.checks) == ("PENDING", "CHAIN_NOT_AVAILABLE", 1)
    assert leg.started_at == action.executed_at
    assert leg.deadline > leg.started_at and leg.next_check_at > timezone.now()
    payload = action_status_payload(action_with_history(action_id=action.pk))
    # The seed's shape and status: executed is the source leg, the bridge rows keep it.
    assert payload["status"] == "executed"
    assert [row["status"] for row in payload["status_history"]][-2:] == ["executed", "executed"]
    assert leg_rows(action) == [
        "destination leg: waiting: Base (local) is not reachable, the bridge delivers EURe "
        "when it is (PENDING, CHAIN_NOT_AVAILABLE)"
    ]
    # Not due again yet: the beat leaves it alone; asked directly, nothing new is written.
    assert bridges_reconcile_pending() == {}
    assert bridge_reconcile(leg_id=leg.pk) == "PENDING"
    assert len(leg_rows(action)) == 1
    leg.refresh_from_db()
    # Backoff: each check waits twice as long as the one before (5 s, 10 s, …).
    assert leg.checks == 2
    assert leg.next_check_at - leg.last_checked_at == timedelta(seconds=10)

    # Another reconciler claims the next check while this one waits for LI.FI: only the
    # claimer writes, so the change is never recorded twice.
    class Overtaken(LifiClient):
        def status(self, **kwargs):
            BridgeLeg.objects.filter(pk=leg.pk).update(checks=F("checks") + 1)
            return super().status(**kwargs)

    bridge.transfers[TX].substatus = "WAIT_SOURCE_CONFIRMATIONS"
    assert bridge_reconcile(leg_id=leg.pk, client=Overtaken(bridge.url, timeout=2)) == "raced"
    assert len(leg_rows(action)) == 1
    bridge.transfers[TX].substatus = "CHAIN_NOT_AVAILABLE"
    BridgeLeg.objects.filter(pk=leg.pk).update(checks=2)

    # LI.FI goes down: recorded on the leg, nothing in the history, still not done.
    bridge.mode = "unavailable"
    assert bridge_reconcile(leg_id=leg.pk) == "unavailable"
    leg.refresh_from_db()
    assert "unavailable" in leg.last_error and leg.status == "PENDING" and leg.done_at is None
    assert leg.next_check_at - leg.last_checked_at == timedelta(seconds=20)
    assert len(leg_rows(action)) == 1


@pytest.mark.django_db
def test_a_failed_bridge_ends_the_leg_and_the_console_lists_it(bridge, user, application):
    action = executed_bridge_swap(user, application)
    quote(bridge)
    bridge.bridge_mode = "fail"
    bridge._scan_logs(CARD, [source_log(bridge)])
    bridge.tick()
    assert bridge_reconcile(leg_id=action.bridge_leg.pk) == "FAILED"
    leg = BridgeLeg.objects.get(action=action)
    assert leg.done_at is not None and leg.next_check_at is None
    assert leg_rows(action) == [
        "destination leg: the bridge failed (FAILED, NOT_PROCESSABLE_REFUND_NEEDED): The "
        "transfer cannot be completed; a refund is required.; nothing arrived on Base (local)"
    ]
    assert Action.objects.get(pk=action.pk).status == "executed"
    rows = needs_attention(Filters()).rows
    assert [(r.id, r.why) for r in rows] == [(str(action.pk), "bridge failed")]
    assert bridges_reconcile_pending() == {}  # finished: not polled any more


@pytest.mark.django_db
def test_the_console_lists_bridges_waiting_too_long_and_flags_the_deadline(
    settings, user, application, tokens
):
    settings.BRIDGE_STUCK_AFTER_MINUTES = 30
    settings.BRIDGE_DEADLINE_MINUTES = 120
    fresh = executed_bridge_swap(user, application, minutes_ago=5)
    waiting = executed_bridge_swap(user, application, minutes_ago=45)
    overdue = executed_bridge_swap(user, application, minutes_ago=200)
    done = executed_bridge_swap(user, application, minutes_ago=300)
    BridgeLeg.objects.filter(action=done).update(status="DONE", substatus="COMPLETED")
    BridgeLeg.objects.filter(action=overdue).update(status="PENDING")
    listed = {r.id: r.why for r in needs_attention(Filters()).rows}
    assert listed == {
        str(waiting.pk): "bridge waiting 45 min",
        str(overdue.pk): "bridge past its deadline",
    }
    assert str(fresh.pk) not in listed
    # Flagged, not ended: still executed, still waiting, still due for polling.
    leg = BridgeLeg.objects.get(action=overdue)
    assert leg.status == "PENDING" and leg.done_at is None
    assert Action.objects.get(pk=overdue.pk).status == "executed"
    from actions.bridges.services import bridge_legs_due

    assert leg in bridge_legs_due(limit=10)


@pytest.mark.postgres
@pytest.mark.django_db
def test_the_needs_attention_query_reads_actions_by_index_not_by_scanning_them(
    user, application, tokens
):
    """The bridge condition is read from the legs first: OR-ed into the actions' own filters
    through the legs' join, it made PostgreSQL scan every action, so the console home grew
    linearly with the table (EXPLAIN with sequential scans disabled: a scan it cannot avoid
    still shows)."""
    from actions.public import actions_needing_attention

    waiting = executed_bridge_swap(user, application, minutes_ago=300)
    found, _ = actions_needing_attention(now=timezone.now())
    assert [list(branch) for branch in found] == [[], [], [waiting]]
    for branch in found:
        # Without an ORDER BY, so walking a date index in order is never the cheaper plan.
        sql, params = branch.order_by().query.sql_with_params()
        nodes = plan_nodes(sql, params, sorts=True)
        # Every read of the actions table is bounded by an index condition: a bitmap of
        # conditions, or an index scan with one (a full index walk has none).
        scans = [n for n in nodes if n.get("Relation Name") == "actions_action"]
        assert scans, nodes
        for scan in scans:
            assert scan["Node Type"] == "Bitmap Heap Scan" or "Index Cond" in scan, nodes


@pytest.mark.django_db
def test_leg_details_say_refund_and_partial_in_plain_words(user, application, tokens):
    action = executed_bridge_swap(user, application)
    leg = action.bridge_leg
    leg.status, leg.substatus = "DONE", "REFUNDED"
    leg.received_amount, leg.received_symbol = "10", "USDC"
    leg.receiving_chain_id, leg.receiving_tx_hash = CARD, "0x" + "ee" * 32
    assert leg_detail(leg) == (
        f"destination leg: refunded 10 USDC on Gnosis (local), tx 0x{'ee' * 32}: the bridge "
        "did not deliver EURe and sent the tokens back (DONE, REFUNDED)"
    )
    leg.substatus, leg.received_amount, leg.receiving_chain_id = "PARTIAL", "9.94", L2
    assert leg_detail(leg) == (
        f"destination leg: received 9.94 USDC on Base (local), tx 0x{'ee' * 32}, instead of "
        "EURe: the bridge delivered another token (DONE, PARTIAL)"
    )
    leg.substatus, leg.received_amount, leg.received_symbol = "COMPLETED", "99.4", "EURe"
    assert leg_detail(leg) == (
        f"destination leg: received 99.4 EURe on Base (local), tx 0x{'ee' * 32}"
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("language", "refund", "partial"),
    [
        (
            "en",
            "sent your 10 USDC back to your account on Gnosis (local)",
            "you received 9.94 USDC on Base (local) instead of EURe",
        ),
        (
            "pt-br",
            "devolveu os seus 10 USDC à sua conta em Gnosis (local)",
            "você recebeu 9,94 USDC em Base (local) em vez de EURe",
        ),
        (
            "es",
            "devolvió tus 10 USDC a tu cuenta en Gnosis (local)",
            "recibiste 9,94 USDC en Base (local) en lugar de EURe",
        ),
    ],
)
def test_the_signing_page_explains_a_refund_and_a_partial_delivery(
    client, user, application, tokens, settings, language, refund, partial
):
    action = executed_bridge_swap(user, application)
    client.force_login(user)
    BridgeLeg.objects.filter(action=action).update(
        status="DONE",
        substatus="REFUNDED",
        received_amount="10",
        received_symbol="USDC",
        receiving_chain_id=CARD,
        receiving_tx_hash="0x" + "ee" * 32,
    )
    page = client.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE=language).text
    assert 'id="bridge-leg"' in page and refund in page
    BridgeLeg.objects.filter(action=action).update(
        substatus="PARTIAL", received_amount="9.94", receiving_chain_id=L2
    )
    page = client.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE=language).text
    assert partial in page
    # The receiving transaction links to its chain's explorer where the table has one.
    settings.CHAINS = tuple(
        replace(c, explorer_url="https://l2scan.test/{kind}/{value}") if c.id == L2 else c
        for c in settings.CHAINS
    )
    page = client.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE=language).text
    assert f'href="https://l2scan.test/tx/0x{"ee" * 32}"' in page


@pytest.mark.django_db
def test_pages_stay_live_while_the_bridge_waits_and_say_waiting(
    client, staff_user, user, application, tokens
):
    action = executed_bridge_swap(user, application)
    BridgeLeg.objects.filter(action=action).update(
        status="PENDING", substatus="CHAIN_NOT_AVAILABLE"
    )
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/")
    assert page.status_code == 200
    assert "Step 2 is waiting: Base (local) cannot be reached right now" in page.text
    assert 'hx-get="/sign/' in page.text  # still polling: the second leg is not done
    client.force_login(staff_user)
    staff = client.get(f"/staff/actions/{action.pk}/")
    assert staff.status_code == 200, staff.status_code
    assert "destination leg: waiting: Base (local) is not reachable" in staff.text
    BridgeLeg.objects.filter(action=action).update(status="DONE", substatus="COMPLETED")
    client.force_login(user)
    assert 'hx-get="/sign/' not in client.get(f"/sign/{action.pk}/").text


@pytest.mark.django_db
def test_a_swap_whose_quote_expired_is_refused_at_signing_in_plain_words(
    client, user, application, tokens
):
    lapsed = timezone.now() - timedelta(seconds=1)
    action = make_action(
        user=user,
        application=application,
        type="swap",
        params={"amount": "10", "symbol": "USDC", "quote_expires_at": lapsed.isoformat()},
    )
    Action.objects.filter(pk=action.pk).update(expires_at=lapsed)
    with pytest.raises(PasskeyError, match="its price quote expired") as refused:
        action_sign(action_id=action.pk, user=user, credential_json="{}")
    assert refused.value.code == "quote_expired"
    action.refresh_from_db()
    assert action.status == ActionStatus.EXPIRED
    assert action.history.last().detail == "the swap quote expired before the user signed"
    client.force_login(user)
    answer = client.post(f"/sign/{action.pk}/approve", "{}", content_type="application/json")
    assert answer.status_code == 409 and answer.json()["code"] == "quote_expired"
    assert "The price quote for this swap expired" in answer.json()["error"]
    page = client.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="en").text
    assert "The price quote for this swap expired before it was signed" in page


def bridge_refunds(server, tx=TX) -> None:
    """The local bridge's answer once its relayer sent the source tokens back (what `_settle`
    records after the refund transaction; the chains of this module's server are down)."""
    transfer = server.transfers[tx]
    action = transfer.quote["action"]
    transfer.receiving = {
        "txHash": "0x" + "ee" * 32,
        "txLink": "",
        "amount": str(transfer.amount),
        "token": action["fromToken"],
        "chainId": action["fromChainId"],
        "timestamp": int(timezone.now().timestamp()),
    }
    transfer.status, transfer.substatus = "DONE", "REFUNDED"
    transfer.message = "The tokens were refunded to the sender on the source chain."


@pytest.mark.django_db
def test_a_refunded_swap_says_refunded_everywhere_and_never_looks_successful(
    bridge,
    user,
    staff_user,
    application,
    client,
    mailoutbox,
    django_capture_on_commit_callbacks,
):
    action = executed_bridge_swap(user, application)
    quote(bridge)
    bridge.bridge_mode = "refund"
    bridge._scan_logs(CARD, [source_log(bridge)])
    bridge_refunds(bridge)
    with django_capture_on_commit_callbacks(execute=True):
        assert bridge_reconcile(leg_id=action.bridge_leg.pk) == "DONE"

    # get_action_status: the seed's status stays (the source transaction ran), the outcome
    # says what the user got.
    payload = action_status_payload(action_with_history(action_id=action.pk))
    assert payload["status"] == "executed"
    assert payload["outcome"] == "refunded"
    assert payload["outcome_detail"] == (
        f"refunded 10 USDC on Gnosis (local), tx 0x{'ee' * 32}: the bridge did not deliver "
        "EURe and sent the tokens back (DONE, REFUNDED)"
    )

    # The e-mail, once, in the user's words.
    assert [m.subject for m in mailoutbox] == ["Picnic: your swap was refunded"]
    assert "so it sent your 10 USDC back to your account on Gnosis (local)" in mailoutbox[0].body
    assert str(action.pk) in mailoutbox[0].body

    # The signing page: no success colour, no "Done", the refund in plain words.
    client.force_login(user)
    for language, label in (("en", "Refunded"), ("pt-br", "Reembolsado")):
        page = client.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE=language).text
        badge = re.search(r'<strong class="badge badge-(\w+)" data-status="executed">', page)
        assert badge and badge[1] == "neutral", page
        assert f"{label}</strong>" in page
        assert 'id="done"' not in page and "badge-done" not in page
        assert 'data-outcome="refunded"' in page
    assert "Concluída" not in page

    # The staff timeline and the console's needs-attention list say it too.
    client.force_login(staff_user)
    staff = client.get(f"/staff/actions/{action.pk}/").text
    assert 'class="badge badge-neutral" data-status="executed"' in staff
    assert "executed · refunded" in staff and "outcome: refunded" in staff
    assert "family-neutral" in staff and "family-done" not in staff
    rows = needs_attention(Filters()).rows
    assert [(r.id, r.why, r.outcome) for r in rows] == [
        (str(action.pk), "bridge refunded: the swap did not happen", "refunded")
    ]
    console = client.get("/staff/").text
    assert "bridge refunded: the swap did not happen" in console
    assert "executed · refunded" in console


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("leg", "outcome", "subject"),
    [
        (("DONE", "COMPLETED", "9.1448", "EURe", L2), "completed", "your swap arrived"),
        (("DONE", "PARTIAL", "9.94", "USDC", L2), "partial", "your swap delivered another token"),
        (
            ("FAILED", "NOT_PROCESSABLE_REFUND_NEEDED", "", "", None),
            "failed",
            "your swap did not arrive",
        ),
        (("PENDING", "WAIT_DESTINATION_TRANSACTION", "", "", None), "pending", None),
    ],
)
def test_every_bridge_ending_has_its_outcome_and_e_mail(
    user, application, tokens, mailoutbox, leg, outcome, subject
):
    action = executed_bridge_swap(user, application)
    status, substatus, amount, symbol, chain_id = leg
    BridgeLeg.objects.filter(action=action).update(
        status=status,
        substatus=substatus,
        received_amount=amount,
        received_symbol=symbol,
        receiving_chain_id=chain_id,
    )
    assert action_status_payload(action_with_history(action_id=action.pk))["outcome"] == outcome
    bridge_leg_mail(leg_id=action.bridge_leg.pk)
    assert [m.subject for m in mailoutbox] == ([f"Picnic: {subject}"] if subject else [])


@pytest.mark.django_db
def test_an_action_without_a_bridge_has_the_outcome_its_status_means(user, application):
    action = make_action(user=user, application=application)
    assert action_status_payload(action_with_history(action_id=action.pk))["outcome"] == "pending"
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to="rejected", actor=Actor.worker())
    payload = action_status_payload(action_with_history(action_id=action.pk))
    assert (payload["outcome"], payload["outcome_detail"]) == ("rejected", None)
