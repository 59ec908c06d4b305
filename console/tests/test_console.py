"""The support console: the home's counts and needs-attention list across the three apps,
filters and saved views by URL, the one search box, bulk resolution, the CSV export."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from eth_utils import to_checksum_address

from actions.execution.models import Action, ActionStatus
from console.selectors import LIMIT
from console.tests.conftest import REVERT, TX_HASH
from core.chains import with_endpoints
from core.models import ActorKind
from dev.testing import assert_reads_in_order_from, plan_nodes
from messaging.models import D, Delivery
from operations.models import Operation, State

pytestmark = pytest.mark.django_db


def keys_listed(page) -> set[str]:
    return {row.key for row in page.context["listing"].rows}


def key(entity) -> str:
    return f"{entity.lifecycle.name}:{entity.pk}"


@pytest.mark.parametrize("older", ["9" * 30, "²", "-5", "1e3", "\x00"])
def test_a_hostile_age_filter_is_ignored_not_a_500(staff_client, stuck_all, older):
    for url in ("/staff/", "/staff/attention.csv"):
        assert staff_client.get(url, {"older": older}).status_code == 200
    assert keys_listed(staff_client.get("/staff/", {"older": older})) == {
        key(e) for e in stuck_all.values()
    }


@pytest.mark.parametrize("field", ["status", "owner"])
def test_a_nul_in_a_filter_is_no_filter_not_a_500(staff_client, stuck_all, field):
    page = staff_client.get("/staff/", {field: "alice\x00"})
    assert page.status_code == 200
    assert keys_listed(page) == {key(e) for e in stuck_all.values()}


@pytest.mark.parametrize("url", ["/staff/search/", "/staff/search.csv"])
def test_a_search_with_a_nul_finds_nothing_not_a_500(staff_client, stuck_all, url):
    response = staff_client.get(url, {"q": "alice\x00"})
    assert response.status_code == 200
    if url.endswith("/"):
        assert "Nothing found" in response.text


def test_the_list_follows_the_event_stream_with_polling_as_the_fallback(staff_client):
    text = staff_client.get("/staff/").text
    # The stream wraps the swapped list (a swap must not reopen it); every transition re-fetches.
    assert 'sse-connect="/staff/events"' in text
    assert 'hx-trigger="sse:changed throttle:2s, every' in text
    assert text.index('sse-connect="/staff/events"') < text.index('id="attention"')


def test_it_lists_stuck_work_of_all_three_apps_with_links_and_full_errors(staff_client, stuck_all):
    page = staff_client.get("/staff/")
    assert page.status_code == 200
    assert keys_listed(page) == {key(e) for e in stuck_all.values()}
    text = page.text
    assert REVERT in text  # the whole error, not cut at 60 characters
    for entity in stuck_all.values():
        assert entity.lifecycle.timeline_url(entity.pk) in text
        assert entity.lifecycle.admin_url(entity.pk) in text
    # counts per lifecycle and status, and a chart per lifecycle
    assert 'data-count="delivery:unknown">1<' in text
    assert 'data-count="operation:needs_review">1<' in text
    # action, delivery, operation, accountChange, spendPermission
    assert text.count('<svg class="chart"') == 5
    # this hour's bar: the delivery's 4 transitions (queued, claimed, sending, unknown)
    hour = timezone.now().strftime("%H")
    assert f"{hour}:00 UTC — 4 transitions, 1 to a failure" in text
    assert ".000" not in text  # no microseconds anywhere


def test_it_leaves_out_work_that_needs_nothing(staff_client, user, application, make_delivery):
    from actions.tests.factories import make_action

    make_action(user=user, application=application)  # proposed, fresh
    make_delivery()  # queued, due now
    page = staff_client.get("/staff/")
    assert keys_listed(page) == set()
    assert "Nothing needs attention." in page.text


def test_the_console_is_for_staff_only(client, user):
    client.force_login(user)
    assert client.get("/staff/").status_code == 302  # to the admin login
    assert client.get("/staff/search/", {"q": "x"}).status_code == 302


@pytest.mark.parametrize(
    "query, expected",
    [
        ({"kind": "delivery"}, {"unknown_delivery"}),
        ({"kind": "action", "status": "failed"}, {"failed_action"}),
        ({"status": "broadcast"}, {"stuck_action"}),
        ({"kind": "operation", "status": "needs_review"}, {"review_operation"}),
        ({"older": "10"}, {"stuck_action"}),
        ({"owner": "nobody"}, set()),
        (
            {"owner": "alice@example.test"},
            {"stuck_action", "failed_action", "unknown_delivery", "review_operation"},
        ),
    ],
)
def test_filters_in_the_query_string_select_the_right_rows(
    staff_client, stuck_all, query, expected
):
    # "older": the stuck action last changed 20 minutes ago; the rest just now
    Action.objects.filter(pk=stuck_all["stuck_action"].pk).update(
        updated_at=timezone.now() - timedelta(minutes=20)
    )
    page = staff_client.get("/staff/", query)
    assert keys_listed(page) == {key(stuck_all[name]) for name in expected}


def test_saved_views_are_links_that_keep_their_filters(staff_client, stuck_all):
    page = staff_client.get("/staff/")
    assert 'href="?kind=delivery&amp;status=unknown"' in page.text
    again = staff_client.get("/staff/?kind=delivery&status=unknown")
    assert keys_listed(again) == {key(stuck_all["unknown_delivery"])}
    assert 'class="current"' in again.text


def test_the_list_partial_refreshes_alone_and_keeps_the_checked_rows(staff_client, stuck_all):
    delivery = key(stuck_all["unknown_delivery"])
    page = staff_client.get("/staff/", {"key": delivery}, HTTP_HX_REQUEST="true")
    assert page.status_code == 200 and "<html" not in page.text
    assert 'id="attention"' in page.text and 'hx-get="/staff/"' in page.text
    assert f'value="{delivery}" aria-label' in page.text and "checked" in page.text


def test_credit_holds_pending_too_long_and_running_too_long_are_listed(
    staff_client, make_operation, settings
):
    from core.lifecycle import Actor
    from operations.services import operation_transition

    holding = make_operation("writing")  # queued, holding credits
    running = make_operation("writing")
    operation_transition(operation_id=running.pk, to=State.RUNNING, actor=Actor.worker())
    old = timezone.now() - timedelta(minutes=settings.CONSOLE_HOLD_STUCK_MINUTES + 5)
    Operation.objects.filter(pk=holding.pk).update(created_at=old)
    Operation.objects.filter(pk=running.pk).update(updated_at=old)
    rows = {row.key: row.why for row in staff_client.get("/staff/").context["listing"].rows}
    assert rows == {
        key(holding): "credit hold pending too long",
        key(running): "running too long",
    }


def test_the_home_runs_the_same_number_of_queries_with_more_rows(
    staff_client, stuck_all, make_delivery, make_operation, django_assert_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        staff_client.get("/staff/")
    for _ in range(5):
        make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
        make_operation("sensitive")
    with django_assert_num_queries(len(few.captured_queries)):
        page = staff_client.get("/staff/")
    assert len(page.context["listing"].rows) == 14


def test_each_source_is_bounded_and_the_page_says_when_cut(
    staff_client, make_operation, monkeypatch
):
    from console import selectors

    monkeypatch.setattr(selectors, "LIMIT", 2)
    for _ in range(3):
        make_operation("sensitive")
    page = staff_client.get("/staff/")
    assert len(page.context["listing"].rows) == 2
    assert "more than 2 operations" in page.text


# --- Search ----------------------------------------------------------------------------------


def found(staff_client, term):
    return staff_client.get("/staff/search/", {"q": term})


def test_search_by_each_id_kind_goes_to_the_timeline(staff_client, stuck_all, user):
    stuck, failed = stuck_all["stuck_action"], stuck_all["failed_action"]
    delivery, operation = stuck_all["unknown_delivery"], stuck_all["review_operation"]
    Delivery.objects.filter(pk=delivery.pk).update(provider_message_id="x-msg-991")
    Operation.objects.filter(pk=operation.pk).update(backend_response_id="resp_abc123")
    cases = {
        str(stuck.pk): stuck,
        TX_HASH: failed,
        TX_HASH.upper().replace("0X", "0x"): failed,
        str(delivery.pk): delivery,
        str(delivery.idempotency_key): delivery,
        "x-msg-991": delivery,
        str(operation.pk): operation,
        "resp_abc123": operation,
    }
    for term, entity in cases.items():
        answer = found(staff_client, term)
        assert answer.status_code == 302, term
        assert answer.url == entity.lifecycle.timeline_url(entity.pk), term


def test_search_by_user_op_hash_and_smart_account(staff_client, stuck_action):
    answer = found(staff_client, stuck_action.user_op_hash)
    assert answer.status_code == 302
    assert answer.url == f"/staff/actions/{stuck_action.pk}/"
    listed = found(staff_client, stuck_action.smart_account.lower())
    assert listed.status_code == 302  # one action on this account


def test_search_by_username_or_email_lists_their_work(staff_client, stuck_all):
    for term in ("alice", "ALICE@example.test"):
        page = found(staff_client, term)
        assert page.status_code == 200
        assert {r.key for r in page.context["result"].rows} == {key(e) for e in stuck_all.values()}


def test_search_by_request_id_finds_what_the_request_wrote(staff_client, stuck_all):
    from core import tracing

    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    delivery = stuck_all["unknown_delivery"]
    with tracing.adopt(trace_id):
        from messaging.services import delivery_resolve_unknown

        delivery_resolve_unknown(
            delivery_id=delivery.pk, staff_user=delivery.created_by, outcome="failed", note="x"
        )
    answer = found(staff_client, trace_id)
    assert answer.status_code == 302 and answer.url == f"/staff/deliveries/{delivery.pk}/"


def test_search_by_an_unused_quote_id(staff_client, user):
    from operations.models import Quote

    quote = Quote.objects.create(
        owner=user, tool="text-gen", submit_field="input", submit_value="x"
    )
    answer = found(staff_client, str(quote.pk))
    assert answer.url == f"/admin/operations/quote/{quote.pk}/change/"


def test_a_search_that_matches_nothing_says_what_it_tried(staff_client, stuck_all):
    for term in ("0x" + "cd" * 32, "no-such-thing", "8d9c9d8e-0000-4000-8000-000000000000"):
        page = found(staff_client, term)
        assert page.status_code == 200
        assert page.context["result"].rows == []
        assert "Nothing found" in page.text and "Tried (exact matches)" in page.text
    assert "tx hash" in found(staff_client, "0x" + "cd" * 32).text
    assert "idempotency key" in found(staff_client, "8d9c9d8e-0000-4000-8000-000000000000").text


@pytest.mark.postgres
def test_search_never_scans_a_table(staff_client, stuck_all):
    """Every search statement on the work tables is an index lookup (EXPLAIN on PostgreSQL,
    with sequential scans disabled so a missing index shows as a refused plan cost)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    terms = [TX_HASH, str(stuck_all["review_operation"].pk), "x-msg", "alice", "0x" + "12" * 20]
    terms.append("4bf92f3577b34da6a3ce929d0e0e4736")  # a request (trace) id
    for term in terms:
        with CaptureQueriesContext(connection) as queries:
            found(staff_client, term)
        with connection.cursor() as cursor:
            cursor.execute("SET enable_seqscan = off")
            for query in queries.captured_queries:
                sql = query["sql"]
                if not sql.startswith("SELECT") or "django_session" in sql or "auth_" in sql[:200]:
                    continue
                cursor.execute("EXPLAIN " + sql)
                plan = "\n".join(line for (line,) in cursor.fetchall())
                assert "Seq Scan" not in plan, (term, sql, plan)
            cursor.execute("SET enable_seqscan = on")


@pytest.mark.postgres
@pytest.mark.parametrize(
    "table, owner",
    [
        ("actions_action", "user_id"),
        ("messaging_delivery", "created_by_id"),
        ("operations_operation", "owner_id"),
    ],
)
def test_search_by_username_reads_only_the_users_newest_rows(staff_client, stuck_all, table, owner):
    """The owner lookup walks an index on (owner, created_at) and stops at the page's limit:
    no sort of every row the user has (which grew with the user's history), no walk of the
    whole table in date order filtering by owner (EXPLAIN, sequential scans and sorts
    disabled)."""
    with CaptureQueriesContext(connection) as queries:
        assert found(staff_client, "alice").status_code == 200
    lookups = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("SELECT") and f'"{table}"."{owner}" IN' in q["sql"]
    ]
    assert len(lookups) == 1, lookups
    # A few rows: the planner's cheapest plan then depends on the statistics the earlier tests
    # left (a sort of three rows costs nothing). Disabled sequential scans and sorts make it
    # take the index whenever one serves; without one the sort or the walk still shows.
    nodes = plan_nodes(lookups[0])
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], nodes
    scans = [n for n in nodes if n.get("Relation Name") == table]
    assert len(scans) == 1 and owner in scans[0].get("Index Cond", ""), nodes


@pytest.mark.postgres
@pytest.mark.parametrize(
    "table, index, query",
    [
        ("messaging_delivery", "delivery_open_updated", {}),
        ("operations_operation", "operation_open_updated", {}),
        # The owner's waiting rows alone (AND-ed with every waiting row, both grew).
        ("messaging_delivery", "delivery_open_owner_updated", {"owner": "alice"}),
        ("operations_operation", "operation_open_owner_updated", {"owner": "alice"}),
    ],
)
def test_the_home_reads_each_kinds_oldest_in_order_from_an_index(
    staff_client, stuck_all, table, index, query
):
    """The needs-attention list takes each kind's oldest changes (up to its limit) from an
    index in that order: not every waiting row of the kind read and sorted, which grew with
    the items waiting (EXPLAIN, sequential scans and sorts disabled)."""
    with CaptureQueriesContext(connection) as queries:
        page = staff_client.get("/staff/", query)
    assert page.status_code == 200 and len(keys_listed(page)) == len(stuck_all)
    (keys,) = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith(f'SELECT "{table}"."updated_at" AS "updated_at", "{table}"."id"')
    ]
    assert keys.endswith(f"ORDER BY 1 ASC LIMIT {LIMIT + 1}"), keys
    assert_reads_in_order_from(keys, table, index)


@pytest.mark.postgres
@pytest.mark.parametrize(
    "query, in_flight",
    [({}, "action_in_flight_updated"), ({"owner": "alice"}, "action_in_flight_user_updated")],
)
def test_the_home_reads_each_reason_an_action_is_listed_in_order_from_an_index(
    staff_client, stuck_all, query, in_flight
):
    """An action is listed stuck in flight or failed in the last hour (or for its bridge):
    each reason's oldest changes are read up to the limit from an index in that order, and
    merged. As one OR, every in-flight action was read and sorted (0.9 ms at 1M rows per app,
    4.8 ms at 10M). Only the merge of those few is sorted."""
    with CaptureQueriesContext(connection) as queries:
        page = staff_client.get("/staff/", query)
    assert {key(stuck_all["stuck_action"]), key(stuck_all["failed_action"])} <= keys_listed(page)
    (keys,) = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith('(SELECT "actions_action"."updated_at" AS "updated_at"')
    ]
    assert " UNION (SELECT " in keys and keys.endswith(f"ORDER BY 1 ASC LIMIT {LIMIT + 1}")
    nodes = plan_nodes(keys)
    (merge,) = [n for n in nodes if n["Node Type"] == "Append"]
    under, stack = [], list(merge["Plans"])
    while stack:
        under.append(stack.pop())
        stack.extend(under[-1].get("Plans", []))
    assert not [n for n in under if n["Node Type"] in ("Sort", "Incremental Sort")], nodes
    assert sorted(n.get("Index Name") for n in under if "Relation Name" in n) == [
        in_flight,
        "action_status_updated",
    ], nodes


def test_the_list_is_the_same_where_the_reasons_cannot_be_merged_in_sql(stuck_all, monkeypatch):
    """SQLite (the embedded default) takes no LIMIT inside a UNION: there an action's reasons
    are one OR, as before, and the page lists the same rows."""
    from console import selectors

    merged = selectors.needs_attention(selectors.Filters(), shown=10)
    monkeypatch.setattr(connection.features, "supports_slicing_ordering_in_compound", False)
    with CaptureQueriesContext(connection) as queries:
        ored = selectors.needs_attention(selectors.Filters(), shown=10)
    assert not [q for q in queries.captured_queries if " UNION " in q["sql"]]
    assert [row.key for row in ored.rows] == [row.key for row in merged.rows]
    assert ored.count == merged.count == len(stuck_all)


@pytest.mark.postgres
def test_search_by_smart_account_reads_the_accounts_newest_from_its_index(
    staff_client, stuck_action
):
    """An account's actions come from LOWER(smart_account), newest first, whatever the
    spelling searched: a page reads itself, not all of the account's history sorted."""
    for term in (
        stuck_action.smart_account.lower(),
        to_checksum_address(stuck_action.smart_account),
    ):
        with CaptureQueriesContext(connection) as queries:
            assert found(staff_client, term).status_code in (200, 302)
        (lookup,) = [
            q["sql"]
            for q in queries.captured_queries
            if 'LOWER("actions_action"."smart_account")' in q["sql"]
        ]
        assert_reads_in_order_from(lookup, "actions_action", "action_account_created")


# --- Bulk resolution ---------------------------------------------------------------------------


def preview(client, move, *entities, **extra):
    return client.post(
        "/staff/bulk/preview/", {"move": move, "key": [key(e) for e in entities], **extra}
    )


def apply(client, move, *entities, note="checked with the provider", **extra):
    return client.post(
        "/staff/bulk/apply/",
        {"move": move, "key": [key(e) for e in entities], "note": note, **extra},
    )


def test_bulk_preview_says_for_each_row_whether_the_move_is_legal(
    staff_client, make_delivery, unknown_delivery
):
    queued = make_delivery()
    page = preview(staff_client, "delivery:resolve_failed", unknown_delivery, queued)
    assert page.status_code == 200
    rows = {row["key"]: row["refusal"] for row in page.context["rows"]}
    assert rows[key(unknown_delivery)] is None
    assert "it is queued" in rows[key(queued)]
    assert Delivery.objects.get(pk=unknown_delivery.pk).status == D.UNKNOWN  # nothing changed yet


def test_bulk_apply_needs_a_note(staff_client, unknown_delivery):
    page = apply(staff_client, "delivery:resolve_failed", unknown_delivery, note="  ")
    assert page.status_code == 400 and "a note is required" in page.text
    assert Delivery.objects.get(pk=unknown_delivery.pk).status == D.UNKNOWN


def test_bulk_resolve_writes_one_history_row_each_and_reports_the_illegal_ones(
    staff_client, staff_user, make_delivery
):
    first = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    second = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    sent = make_delivery(D.CLAIMED, D.SENDING, D.SENT, sent={"provider_message_id": "m1"})
    before = {d.pk: d.history.count() for d in (first, second, sent)}
    page = apply(
        staff_client, "delivery:resolve_failed", first, sent, second, note="X support says no"
    )
    assert page.status_code == 200
    outcomes = {o.key: o for o, _ in page.context["outcomes"]}
    assert outcomes[key(sent)].ok is False and "it is sent" in outcomes[key(sent)].text
    assert outcomes[key(first)].ok and outcomes[key(second)].ok
    for delivery in (first, second):
        delivery.refresh_from_db()
        assert delivery.status == D.FAILED
        assert delivery.history.count() == before[delivery.pk] + 1
        row = delivery.history.last()
        assert (row.actor_kind, row.actor_user) == (ActorKind.STAFF, staff_user)
        assert "X support says no" in row.detail
    assert sent.history.count() == before[sent.pk]
    assert (
        '<span data-count="done">2</span> of <span data-count="outcomes">3</span> done' in page.text
    )


def test_bulk_moves_across_apps_through_their_services(
    staff_client, staff_user, stuck_action, review_operation, make_operation, make_delivery
):
    # actions: mark failed
    page = apply(staff_client, "action:mark_failed", stuck_action, note="nonce used elsewhere")
    stuck_action.refresh_from_db()
    assert stuck_action.status == ActionStatus.FAILED
    row = stuck_action.history.last()
    assert row.actor_user == staff_user and "nonce used elsewhere" in row.detail
    # operations: approve, pause, resume, cancel
    apply(staff_client, "operation:approve", review_operation, note="fine")
    review_operation.refresh_from_db()
    assert review_operation.state == State.QUEUED
    assert review_operation.history.last().detail == "approved by staff sam: fine"
    queued = make_operation("writing")
    apply(staff_client, "operation:pause", queued, note="backend incident")
    assert Operation.objects.get(pk=queued.pk).state == State.PAUSED
    apply(staff_client, "operation:resume", queued, note="incident over")
    queued.refresh_from_db()
    assert queued.state == State.QUEUED
    assert queued.history.last().detail == "resumed by staff sam: incident over"
    page = apply(staff_client, "operation:cancel", queued, note="customer asked")
    queued.refresh_from_db()
    assert queued.state == State.CANCELLED and queued.pending_credits == 0
    assert queued.history.last().actor_user == staff_user
    # deliveries: cancel with the note
    waiting = make_delivery()
    apply(staff_client, "delivery:cancel", waiting, note="duplicate")
    waiting.refresh_from_db()
    assert waiting.status == D.CANCELLED
    assert waiting.history.last().detail == "cancelled by staff sam: duplicate"
    assert page.status_code == 200


def test_bulk_resolve_as_sent_takes_each_rows_message_id(
    staff_client, unknown_delivery, make_delivery
):
    other = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    page = apply(
        staff_client,
        "delivery:resolve_sent",
        unknown_delivery,
        other,
        **{f"message_id:{key(unknown_delivery)}": "x-77"},
    )
    outcomes = {o.key: o for o, _ in page.context["outcomes"]}
    assert outcomes[key(unknown_delivery)].ok
    assert "provider message id" in outcomes[key(other)].text
    assert Delivery.objects.get(pk=unknown_delivery.pk).provider_message_id == "x-77"
    assert Delivery.objects.get(pk=other.pk).status == D.UNKNOWN


def test_reconcile_now_records_the_staff_user_and_note(
    staff_client, staff_user, stuck_action, settings
):
    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, bundler_url="http://127.0.0.1:9"
    )  # nothing listens: the outcome is reported
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, rpc_url="http://127.0.0.1:9")
    settings.BUNDLER_TIMEOUT_SECONDS = 0.5
    count = stuck_action.history.count()
    page = apply(staff_client, "action:reconcile", stuck_action, note="customer called")
    ((outcome, _),) = page.context["outcomes"]
    assert outcome.ok and outcome.text.startswith("reconciled")
    rows = list(stuck_action.history.order_by("id"))[count:]
    assert rows[0].actor_user == staff_user and "customer called" in rows[0].detail


@pytest.mark.parametrize(
    "move, perm",
    [
        ("action:mark_failed", "resolve_action"),
        ("delivery:resolve_failed", "resolve_delivery"),
        ("operation:approve", "review_operation"),
        ("operation:pause", "pause_operation"),
    ],
)
def test_a_staff_member_without_the_moves_permission_gets_403(
    client, make_user, stuck_all, move, perm
):
    member = make_user("rita", is_staff=True)
    # every other move's permission, and the view permission of every kind
    others = Permission.objects.exclude(codename=perm).filter(
        codename__in=["resolve_action", "resolve_delivery", "review_operation", "pause_operation",
                      "view_action", "view_delivery", "view_operation"]
    )  # fmt: skip
    member.user_permissions.add(*others)
    client.force_login(member)
    target = {
        "action": stuck_all["stuck_action"],
        "delivery": stuck_all["unknown_delivery"],
        "operation": stuck_all["review_operation"],
    }[move.partition(":")[0]]
    status = target.current_status
    assert preview(client, move, target).status_code == 403
    assert apply(client, move, target).status_code == 403
    target.refresh_from_db()
    assert target.current_status == status
    # with the permission, the same member may
    member.user_permissions.add(Permission.objects.get(codename=perm))
    client.force_login(type(member).objects.get(pk=member.pk))
    assert preview(client, move, target).status_code == 200


# --- CSV ---------------------------------------------------------------------------------------


def read_csv(response) -> list[dict]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


def test_the_csv_export_streams_the_filtered_list(staff_client, stuck_all):
    response = staff_client.get("/staff/attention.csv", {"kind": "action"})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/csv"
    assert response["Content-Disposition"].startswith('attachment; filename="needs-attention-')
    rows = read_csv(response)
    assert {r["id"] for r in rows} == {
        str(stuck_all["stuck_action"].pk),
        str(stuck_all["failed_action"].pk),
    }
    failed = next(r for r in rows if r["status"] == "failed")
    assert failed["error"] == REVERT and failed["owner"] == "alice"
    assert failed["timeline"] == f"http://testserver/staff/actions/{stuck_all['failed_action'].pk}/"
    assert "." not in failed["created_at"]  # seconds, no microseconds
    assert list(rows[0]) == [
        "kind", "id", "status", "why", "owner", "created_at", "last_change", "age_minutes",
        "error", "timeline", "admin",
    ]  # fmt: skip


def test_the_page_links_its_csv_with_its_filters(staff_client, stuck_all):
    page = staff_client.get("/staff/", {"kind": "delivery", "status": "unknown"})
    assert 'href="/staff/attention.csv?kind=delivery&amp;status=unknown"' in page.text


def test_search_results_export_as_csv(staff_client, stuck_all):
    rows = read_csv(staff_client.get("/staff/search.csv", {"q": "alice"}))
    assert len(rows) == 4 and {r["kind"] for r in rows} == {"action", "delivery", "operation"}


def test_a_staff_member_sees_only_the_kinds_of_work_they_may_view(client, make_user, stuck_all):
    member = make_user("vera", is_staff=True)
    member.user_permissions.add(Permission.objects.get(codename="view_delivery"))
    client.force_login(member)
    assert keys_listed(client.get("/staff/")) == {key(stuck_all["unknown_delivery"])}
    only = stuck_all["unknown_delivery"]
    assert found(client, "alice").url == f"/staff/deliveries/{only.pk}/"  # the one they see
    assert found(client, TX_HASH).context["result"].rows == []


def test_a_long_list_shows_the_oldest_rows_and_the_csv_has_them_all(
    staff_client, stuck_all, monkeypatch
):
    from console import views

    monkeypatch.setattr(views, "SHOWN", 2)
    page = staff_client.get("/staff/")
    assert page.text.count('<tr data-key="') == 2
    assert "the 2 oldest shown" in page.text
    assert len(read_csv(staff_client.get("/staff/attention.csv"))) == 4


def test_counts_and_charts_are_cached_for_a_few_seconds(
    staff_client, staff_user, stuck_all, settings
):
    from django.core.cache import cache

    from operations.decisions import operation_pause

    settings.CONSOLE_SUMMARY_CACHE_SECONDS = 15
    cache.delete("console:summaries")
    first = staff_client.get("/staff/")
    assert 'data-count="operation:needs_review">1<' in first.text
    operation_pause(operation_id=stuck_all["review_operation"].pk, staff_user=staff_user)
    again = staff_client.get("/staff/")
    assert 'data-count="operation:needs_review">1<' in again.text  # as of the first load
    # the list itself is always fresh
    assert {r.status for r in again.context["listing"].rows if r.kind == "operation"} == {"paused"}
    cache.delete("console:summaries")


def test_no_staff_page_shows_a_microsecond_timestamp(staff_client, stuck_all):
    """Each kind's timeline, the review queue, the console: to the second, in <time>."""
    import re

    pages = [entity.lifecycle.timeline_url(entity.pk) for entity in stuck_all.values()]
    pages += ["/staff/", "/staff/operations/review/", "/staff/search/?q=alice"]
    admin = [entity.lifecycle.admin_url(entity.pk) for entity in stuck_all.values()]
    for url in pages:
        response = staff_client.get(url)
        assert response.status_code == 200, url
        assert not re.search(r"\d\d:\d\d:\d\d\.\d{3,6}", response.text), url
        if url != "/staff/" and "search" not in url:
            assert "<time datetime=" in response.text, url
    for url in admin:  # the change pages, read-only JSON (a review's request time) included
        response = staff_client.get(url)
        assert response.status_code == 200, url
        assert not re.search(r"\d\d:\d\d:\d\d\.\d{3,6}", response.text), url


def test_the_chart_axis_ends_now_not_at_the_end_of_the_hour(staff_client, stuck_all):
    text = staff_client.get("/staff/").text
    before = timezone.localtime()
    labels = set(re.findall(r"<span>now \((\d\d:\d\d) UTC\)</span>", text))
    after = timezone.localtime()
    assert labels and labels <= {f"{before:%H:%M}", f"{after:%H:%M}"}


# --- Reading only what a page shows ------------------------------------------------------------


def rows_built(monkeypatch) -> list[str]:
    """The ids each kind's row function builds (a row read whole), as they are built."""
    from console import selectors

    built: list[str] = []
    for name in ("_action_row", "_delivery_row", "_operation_row"):
        real = getattr(selectors, name)

        def spy(item, why, real=real):
            built.append(str(item.pk))
            return real(item, why)

        monkeypatch.setattr(selectors, name, spy)
        monkeypatch.setitem(selectors._TO_ROW, name[1:].removesuffix("_row"), spy)
    return built


def test_the_home_reads_whole_only_the_rows_it_shows(staff_client, stuck_all, monkeypatch):
    from console import selectors, views

    every = selectors.needs_attention(selectors.Filters()).rows
    built = rows_built(monkeypatch)
    monkeypatch.setattr(views, "SHOWN", 2)
    page = staff_client.get("/staff/")
    listing = page.context["listing"]
    # The count and the order are the whole list's; two rows built, the two oldest.
    assert listing.count == len(every) == 4 and page.text.count('<tr data-key="') == 2
    assert [row.key for row in listing.rows] == [row.key for row in every[:2]]
    assert sorted(built) == sorted(row.id for row in every[:2])
    assert 'data-count="rows">4<' in page.text and "the 2 oldest shown" in page.text


def test_a_kind_cut_at_its_bound_is_counted_at_the_bound_and_said(
    staff_client, make_operation, monkeypatch
):
    from console import selectors, views

    monkeypatch.setattr(selectors, "LIMIT", 3)
    monkeypatch.setattr(views, "SHOWN", 2)
    for _ in range(5):
        make_operation("sensitive")
    page = staff_client.get("/staff/")
    assert page.context["listing"].count == 3 and page.context["listing"].cut == ["operation"]
    assert 'data-count="rows">3<' in page.text and "more than 3 operations" in page.text
    assert page.text.count('<tr data-key="') == 2


def test_a_row_that_leaves_the_list_between_the_two_reads_is_not_shown(
    staff_client, stuck_all, monkeypatch
):
    """The ids are read, then the rows by primary key: one changed in between (resolved) is
    left out, not shown stale."""
    from console import selectors

    gone = stuck_all["unknown_delivery"]
    real = selectors._bounded

    def then_resolve(queryset, order):
        found = real(queryset, order)
        if queryset.model is Delivery:
            # As every change does (the transition function, a touch): a new updated_at.
            Delivery.objects.filter(pk=gone.pk).update(status=D.FAILED, updated_at=timezone.now())
        return found

    monkeypatch.setattr(selectors, "_bounded", then_resolve)
    listing = selectors.needs_attention(selectors.Filters(), shown=10)
    assert key(gone) not in {row.key for row in listing.rows}
    assert len(listing.rows) == 3 and listing.count == 4


def test_a_search_reads_whole_only_the_rows_it_shows(staff_client, stuck_all, monkeypatch):
    from console import selectors, views

    every = selectors.search("alice").rows
    built = rows_built(monkeypatch)
    monkeypatch.setattr(views, "SHOWN", 3)
    page = staff_client.get("/staff/search/", {"q": "alice"})
    result = page.context["result"]
    assert result.count == result.found == len(every) == 4
    assert [row.key for row in result.rows] == [row.key for row in every[:3]]
    assert sorted(built) == sorted(row.id for row in every[:3])
    assert 'data-count="found">4<' in page.text and "The first 3 shown" in page.text


def test_a_search_that_finds_one_row_among_the_ids_still_goes_to_it(staff_client, stuck_all):
    operation = stuck_all["review_operation"]
    page = staff_client.get("/staff/search/", {"q": str(operation.pk)})
    assert page.status_code == 302 and page.url == f"/staff/operations/{operation.pk}/"


def test_the_csv_streams_in_chunks_of_rows_with_the_same_lines(
    staff_client, stuck_all, monkeypatch
):
    from console import views

    whole = b"".join(staff_client.get("/staff/attention.csv").streaming_content)
    monkeypatch.setattr(views, "CSV_CHUNK", 2)
    chunks = list(staff_client.get("/staff/attention.csv").streaming_content)
    # Header and four rows: chunks of two lines, then the last one.
    assert [chunk.count(b"\r\n") for chunk in chunks] == [2, 2, 1]
    assert b"".join(chunks) == whole


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo", "Asia/Kolkata"])
def test_the_stamp_filter_writes_what_the_date_filter_wrote(zone):
    from datetime import datetime

    from django.template import engines

    moment = datetime(2026, 3, 8, 23, 59, 7, 123456, tzinfo=UTC)
    template = engines["django"].from_string(
        "{% load console_tags %}{{ t|stamp }}|{{ t|date:'Y-m-d H:i:s T' }}"
    )
    with timezone.override(zone):
        ours, django = template.render({"t": moment}).split("|")
    assert ours == django


# The row markup as console/_rows.html drew it in template nodes, before console_row: the tag
# must write the same bytes for every kind of row.
ROW_TEMPLATE = """{% load console_tags chains picnic_ui %}<tr data-key="{{ row.key }}" class="status-{{ row.status }} family-{{ row.outcome|default:row.status|status_family }}">
      {% if selectable %}<td><input type="checkbox" name="key" value="{{ row.key }}" aria-label="select {{ row.kind }} {{ row.id }}"{% if row.key in checked %} checked{% endif %}></td>{% endif %}
      <td>{{ row.kind }}{% if row.chain_id %} <small class="muted">on {% chain row.chain_id %}</small>{% endif %}</td>
      <td class="nowrap">{{ row.id|short_id }}<button type="button" class="copy" data-copy="{{ row.id }}" aria-label="copy {{ row.kind }} id {{ row.id }}">copy</button></td>
      <td class="nowrap">{% status_badge row.status outcome=row.outcome %}</td>
      <td>{{ row.why }}</td>
      <td class="nowrap age" title="last change {{ row.since|date:'Y-m-d H:i:s T' }}, created {{ row.created_at|date:'Y-m-d H:i:s T' }}">{{ row.since|age:now }}</td>
      <td>{{ row.owner }}</td>
      <td class="error">{{ row.error }}</td>
      <td class="nowrap">{% if row.timeline_url %}<a href="{{ row.timeline_url }}">timeline</a> · {% endif %}<a href="{{ row.admin_url }}">admin</a>{% if row.tx_hash %}{% explorer_url row.chain_id "tx" row.tx_hash as tx_url %}{% if tx_url %} · <a class="explorer" href="{{ tx_url }}" rel="noopener noreferrer" title="{{ row.tx_hash }} on the explorer">tx</a>{% endif %}{% endif %}</td>
    </tr>"""  # noqa: E501


@pytest.mark.parametrize("zone", ["UTC", "America/Sao_Paulo"])
def test_a_console_row_is_the_markup_the_template_drew(settings, zone):
    from dataclasses import replace

    from django.template import Context, engines

    from console.selectors import Row
    from console.templatetags.console_tags import console_row
    from core.chains import Chain

    chain = next(row for row in settings.CHAINS if row.id == settings.CARD_CHAIN_ID)
    settings.CHAINS = (
        replace(chain, explorer_url="https://scan.example/{kind}/{value}?a=1&b=2"),
        *(row for row in settings.CHAINS if row.id != chain.id),
    )
    assert isinstance(settings.CHAINS[0], Chain)
    now = timezone.now()
    base = Row(
        kind="action",
        id="6f1c0a4e-9d5b-4c1e-8f0a-2b3c4d5e6f70",
        status="executed",
        since=now - timedelta(hours=3, minutes=2),
        created_at=now - timedelta(days=2),
        owner='o\'neil <b>&"co"',
        error='revert: "<script>alert(1)</script>" & more',
        why="stuck > 1 h",
        chain_id=chain.id,
        tx_hash="0x" + "ab" * 32,
        outcome="refunded",
    )
    rows = [
        base,
        replace(base, chain_id=None, tx_hash="", outcome=""),
        replace(base, kind="delivery", status="unknown", chain_id=None, tx_hash="", error=""),
        replace(base, kind="accountChange", id="42", status="pending", outcome="", chain_id=None),
    ]
    template = engines["django"].from_string(ROW_TEMPLATE)
    drawn = []
    with timezone.override(zone):
        for row in rows:
            for selectable, checked in ((True, {row.key}), (True, set()), (False, set())):
                values = {"row": row, "selectable": selectable, "checked": checked, "now": now}
                drawn.append(template.render(values))
                assert console_row(Context(values), row) == drawn[-1], (row, selectable, checked)
    # The branches were drawn: the explorer link, a checked box, escaped text.
    text = "".join(drawn)
    assert 'class="explorer" href="https://scan.example/tx/0x' in text and " checked>" in text
    assert "&lt;script&gt;" in text and "o&#x27;neil &lt;b&gt;&amp;&quot;co&quot;" in text


# --- The 24 h charts -----------------------------------------------------------------------------


def chart_of(kind: str) -> dict:
    from console.summaries import summaries

    summary = next(s for s in summaries() if s.name == kind)
    return {hour: (total, failed) for hour, total, failed in summary.hours}


def backdate(delivery, when, status: str | None = None) -> None:
    """Move a delivery's history rows (append-only for the models) to `when`, in SQL."""
    from django.db import connection

    sql = "UPDATE messaging_deliverystatushistory SET timestamp = %s WHERE delivery_id = %s"
    params = [when, delivery.pk]
    if status is not None:
        sql, params = sql + " AND status = %s", [*params, status]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_an_ended_hour_is_read_once_and_kept_while_the_hour_in_progress_is_read_again(
    settings, make_delivery
):
    """With the summary cache on, an ended hour is kept (it takes no more transitions): a
    transition written into it afterwards is not read again; one in the hour in progress is.
    With the cache off, every hour is read."""
    from django.core.cache import cache

    cache.clear()
    settings.CONSOLE_SUMMARY_CACHE_SECONDS = 15
    now = timezone.now()
    three_ago = (now - timedelta(hours=3)).replace(minute=30, second=0, microsecond=0)
    hour = three_ago.replace(minute=0)
    backdate(make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN), three_ago)
    assert chart_of("delivery")[hour] == (4, 1)  # queued, claimed, sending, unknown (a failure)
    later = make_delivery(D.CLAIMED, D.SENDING, D.FAILED)
    backdate(later, three_ago, status=D.FAILED)  # into the kept hour: not read again
    after = chart_of("delivery")
    assert after[hour] == (4, 1)
    assert after[max(after)][0] >= 3  # the later one's other transitions, in this hour
    settings.CONSOLE_SUMMARY_CACHE_SECONDS = 0
    assert chart_of("delivery")[hour] == (5, 2)  # every hour read: both
    cache.clear()


def test_an_hour_ended_less_than_a_minute_ago_is_not_kept(settings, make_delivery):
    from django.core.cache import cache

    from console.summaries import _transitions_by_hour
    from core.lifecycle import lifecycle_named

    cache.clear()
    settings.CONSOLE_SUMMARY_CACHE_SECONDS = 15
    delivery = make_delivery()
    hour = (timezone.now() - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    start, now = hour - timedelta(hours=22), hour + timedelta(hours=1, seconds=30)
    lifecycle = lifecycle_named("delivery")
    assert _transitions_by_hour(lifecycle, start, now).get(hour) is None
    backdate(delivery, hour + timedelta(minutes=59, seconds=59))  # committed late
    assert _transitions_by_hour(lifecycle, start, now)[hour] == [1, 0]  # read again, not kept
    later = now + timedelta(minutes=1)  # now settled: kept from here on
    assert _transitions_by_hour(lifecycle, start, later)[hour] == [1, 0]
    backdate(make_delivery(), hour + timedelta(minutes=5))  # into the kept hour: not read
    assert _transitions_by_hour(lifecycle, start, later)[hour] == [1, 0]
    cache.clear()
