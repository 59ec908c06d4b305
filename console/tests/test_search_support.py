"""The console's search finds what support is asked for: a transfer's recipient (any case),
its ENS name, a spending permission's name and a cross-chain swap's receiving tx hash; each on
an index, in a number of queries that does not grow with what it finds."""

from __future__ import annotations

import pytest

from actions.bridges.models import BridgeLeg
from actions.execution.models import Action
from actions.tests.factories import make_action, make_offline_wallet, make_permission

pytestmark = pytest.mark.django_db

RECIPIENT = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"  # EIP-55, as a transfer stores it
RECEIVING_TX = "0x" + "5e" * 32


def transfer_to(user, application, **params) -> Action:
    return make_action(
        user=user,
        application=application,
        params={"amount": "1.5", "asset_id": "eip155:31337/erc20:0x0", **params},
    )


def swap_received(user, application, receiving_tx_hash: str) -> Action:
    action = make_action(user=user, application=application, type="swap", params={})
    BridgeLeg.objects.create(
        action=action,
        from_chain_id=31337,
        to_chain_id=31338,
        tool="demo-bridge",
        to_asset_id="eip155:31338/erc20:0x0",
        to_symbol="EURe",
        status="DONE",
        receiving_tx_hash=receiving_tx_hash,
    )
    return action


def listed(staff_client, term) -> set[str]:
    """Where each thing the search lists leads (a single hit redirects to its timeline)."""
    page = staff_client.get("/staff/search/", {"q": term})
    if page.status_code == 302:
        return {page.url}
    assert page.status_code == 200
    return {row.timeline_url or row.admin_url for row in page.context["result"].rows}


def timeline(entity) -> str:
    """Where the console sends staff for it: its timeline, else its admin page."""
    lifecycle = entity.lifecycle
    return lifecycle.timeline_url(entity.pk) or lifecycle.admin_url(entity.pk)


def queries_stay_bounded(django_assert_max_num_queries, staff_client, term, make_more, first):
    """The queries of a search that finds one, then of the same search finding four more:
    the same bound (one query per lookup, never one per row)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one:
        assert listed(staff_client, term) == {timeline(first)}
    more = [make_more() for _ in range(4)]
    with django_assert_max_num_queries(len(one.captured_queries)):
        found = listed(staff_client, term)
    assert found == {timeline(e) for e in [first, *more]}


def test_a_recipient_address_finds_its_transfers_in_any_case(
    staff_client, user, application, django_assert_max_num_queries
):
    first = transfer_to(user, application, to=RECIPIENT)
    transfer_to(user, application, to="0x" + "12" * 20)  # another recipient: not listed
    for term in (RECIPIENT, RECIPIENT.lower(), "0x" + RECIPIENT[2:].upper()):
        assert listed(staff_client, term) == {timeline(first)}, term
    queries_stay_bounded(
        django_assert_max_num_queries,
        staff_client,
        RECIPIENT.lower(),
        lambda: transfer_to(user, application, to=RECIPIENT),
        first,
    )


def test_an_ens_name_finds_the_transfers_sent_to_it(
    staff_client, user, application, django_assert_max_num_queries
):
    first = transfer_to(user, application, to=RECIPIENT, ens="alice.eth", ens_source="to")
    transfer_to(user, application, to=RECIPIENT, ens="bob.eth", ens_source="to")
    # Typed as support hears it: normalised like the stored name (ENSIP-15).
    for term in ("alice.eth", " Alice.ETH "):
        assert listed(staff_client, term) == {timeline(first)}, term
    assert "ENS name" in staff_client.get("/staff/search/", {"q": "carol.eth"}).text
    queries_stay_bounded(
        django_assert_max_num_queries,
        staff_client,
        "alice.eth",
        lambda: transfer_to(user, application, to=RECIPIENT, ens="alice.eth", ens_source="to"),
        first,
    )


def test_a_permission_name_finds_the_permission(
    staff_client, user, application, monkeypatch, django_assert_max_num_queries
):
    wallet = make_offline_wallet(user, monkeypatch)
    groceries = make_permission(user=user, application=application, account=wallet, name="Feira")
    make_permission(user=user, application=application, account=wallet, name="coffee")
    for term in ("Feira", "feira", "FEIRA"):
        assert listed(staff_client, term) == {timeline(groceries)}, term
    queries_stay_bounded(
        django_assert_max_num_queries,
        staff_client,
        "feira",
        lambda: make_permission(user=user, application=application, account=wallet, name="feira"),
        groceries,
    )


def test_the_bridge_receiving_tx_hash_finds_the_swap(
    staff_client, user, application, django_assert_max_num_queries
):
    first = swap_received(user, application, RECEIVING_TX)
    swap_received(user, application, "0x" + "77" * 32)
    for term in (RECEIVING_TX, RECEIVING_TX.upper().replace("0X", "0x")):
        assert listed(staff_client, term) == {timeline(first)}, term
    queries_stay_bounded(
        django_assert_max_num_queries,
        staff_client,
        RECEIVING_TX,
        lambda: swap_received(user, application, RECEIVING_TX),
        first,
    )


@pytest.mark.postgres
@pytest.mark.parametrize(
    "term, index",
    [
        (RECIPIENT.lower(), "action_params_to"),
        ("alice.eth", "action_params_ens"),
        ("Groceries", "spend_permission_name_lower"),
        (RECEIVING_TX, "bridge_leg_receiving_tx"),
    ],
)
def test_each_new_needle_is_looked_up_on_its_index(
    staff_client, user, application, monkeypatch, term, index
):
    """EXPLAIN of the search's statements, sequential scans disabled: the needle's own index
    serves one of them and none scans a table (without the index the planner walks another
    one whole, filtering every row, which an EXPLAIN shows as no Seq Scan either)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    transfer_to(user, application, to=RECIPIENT, ens="alice.eth", ens_source="to")
    swap_received(user, application, RECEIVING_TX)
    make_permission(
        user=user, application=application, account=make_offline_wallet(user, monkeypatch)
    )
    with CaptureQueriesContext(connection) as queries:
        staff_client.get("/staff/search/", {"q": term})
    plans = []
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            for query in queries.captured_queries:
                sql = query["sql"]
                if sql.startswith("SELECT") and "django_session" not in sql:
                    cursor.execute("EXPLAIN " + sql)
                    plans.append("\n".join(line for (line,) in cursor.fetchall()))
        finally:
            cursor.execute("SET enable_seqscan = on")
    assert any(index in plan for plan in plans), plans
    assert not any("Seq Scan" in plan for plan in plans if "auth_user" not in plan), plans
