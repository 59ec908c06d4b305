"""The operations back-office at scale: the same number of queries whatever the row count,
exact indexed searches (the id on the primary key, not cast to text), filters that select
the right rows."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dev.testing import (
    admin_search,
    assert_change_page_bounds_history,
    assert_queries_do_not_grow,
    assert_reads_in_order_from,
    plan_nodes,
)
from operations import billing
from operations.models import Operation, State
from operations.tests.factories import fund, make_dispatch_unknown, submit_operation

ORDER = 'ORDER BY "operations_operation"."created_at" DESC, "operations_operation"."id" DESC'
URL = "/admin/operations/operation/"


@pytest.fixture
def submit(user):
    fund(user, "1000")

    def make(owner=None, category="writing") -> Operation:
        return submit_operation(owner=owner or user, category=category)

    return make


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?attention=needs_review",
        "?attention=dispatch_unknown",
        "?attention=stuck_running",
        "?state__exact=queued",
        "?billing_status__exact=reconciling",
        "?channel__exact=api",
        "?q=alice",
    ],
)
def test_the_changelist_queries_do_not_grow_with_the_rows(staff_client, submit, query):
    submit()
    submit(category="sensitive")

    def more():
        for _ in range(5):
            submit()
            submit(category="sensitive")

    assert_queries_do_not_grow(staff_client, URL + query, more)


def test_the_change_page_queries_do_not_grow_with_the_history(staff_client, staff_user, submit):
    operation = submit()
    assert_change_page_bounds_history(staff_client, URL, operation, staff_user=staff_user)


def _search(client, term: str) -> str:
    return admin_search(client, URL, term)


def test_each_id_search_finds_exactly_its_operation(staff_client, submit, other_user):
    billing.wallet_grant(owner=other_user, amount=Decimal("100"))
    target, other = submit(), submit(owner=other_user)
    Operation.objects.filter(pk=target.pk).update(backend_response_id="resp_abc123")
    for term in (str(target.pk), str(target.pk).upper(), "resp_abc123"):
        text = _search(staff_client, term)
        assert str(target.pk) in text and str(other.pk) not in text
    for term in ("alice", "Alice@Example.test"):
        text = _search(staff_client, term)
        assert str(target.pk) in text and str(other.pk) not in text
    assert str(target.pk) not in _search(staff_client, "resp_abc")  # exact, not a prefix
    assert str(target.pk) not in _search(staff_client, "text-gen")  # no free-text scan


def _page_sql(client, query: str) -> str:
    """The statement that reads the changelist's page of operations for `query` (with one page
    of rows or fewer, Django reads them without a LIMIT: the order is still the index's)."""
    with CaptureQueriesContext(connection) as queries:
        assert client.get(URL + query).status_code == 200
    (page,) = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith('SELECT "operations_operation".') and ORDER in q["sql"]
    ]
    return page


@pytest.mark.postgres
@pytest.mark.parametrize(
    "attention, index",
    [
        ("stuck_running", "operation_open_created"),
        ("reconciling", "operation_open_created"),
        ("needs_review", "operation_review_queue"),  # the review queue's, narrower still
    ],
)
def test_an_attention_filter_reads_its_page_newest_first_from_an_index(
    staff_client, submit, attention, index
):
    """Unfinished work, newest first, from a partial index of it: not every matching
    operation read and sorted (2,500 of them at 10M rows, for a page of 50)."""
    submit(category="sensitive")
    page = _page_sql(staff_client, f"?attention={attention}")
    assert_reads_in_order_from(page, "operations_operation", index)


@pytest.mark.postgres
def test_a_search_by_username_reads_the_owners_newest_from_its_index(staff_client, submit):
    """A username is no backend response id (looked up first, alone): the page is the owner's
    newest, read from (owner, created_at) and stopped at 50, not all of the owner's
    operations OR-ed with the response id and sorted."""
    submit()
    nodes = plan_nodes(_page_sql(staff_client, "?q=alice"))
    assert not [n for n in nodes if n["Node Type"] == "Sort"], nodes  # an Incremental one, by id
    scans = [n for n in nodes if n.get("Relation Name") == "operations_operation"]
    assert [n.get("Index Name") for n in scans] == ["operation_owner_created"], nodes


def test_the_attention_filters_select_the_right_rows(staff_client, submit, settings):
    settings.OPERATIONS_STUCK_RUNNING_MINUTES = 10
    review = submit(category="sensitive")
    unknown = submit()
    make_dispatch_unknown(unknown)
    plain = submit()
    running = submit()
    Operation.objects.filter(pk=running.pk).update(
        state=State.RUNNING,
        status="running",
        stage="generation",
        updated_at=timezone.now() - timedelta(minutes=11),
    )
    cases = {
        "needs_review": {review},
        "reconciling": {unknown},
        "dispatch_unknown": {unknown},
        "stuck_running": {running},
    }
    everyone = {review, unknown, plain, running}
    for value, expected in cases.items():
        page = staff_client.get(URL, {"attention": value})
        assert all(str(op.pk) in page.text for op in expected), value
        assert not any(str(op.pk) in page.text for op in everyone - expected), value
    page = staff_client.get(URL, {"billing_status__exact": "reconciling"})
    assert str(unknown.pk) in page.text and str(plain.pk) not in page.text


@pytest.mark.parametrize(
    ("url", "field"),
    [("/admin/operations/quote/add/", "owner"), ("/admin/actions/rampaccount/add/", "user")],
)
def test_forms_with_a_user_take_its_id_not_a_select_of_every_user(
    staff_client, make_user, url, field
):
    page = staff_client.get(url)
    assert page.status_code == 200
    assert f'name="{field}"' in page.text and f'<select name="{field}"' not in page.text

    def more():
        for n in range(5):
            make_user(f"someone{n}")

    assert_queries_do_not_grow(staff_client, url, more)
