"""The operations back-office at scale: the same number of queries whatever the row count,
exact indexed searches (the id on the primary key, not cast to text), filters that select
the right rows."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from dev.testing import (
    admin_search,
    assert_change_page_bounds_history,
    assert_queries_do_not_grow,
)
from operations import billing
from operations.models import Operation, State
from operations.tests.factories import fund, make_dispatch_unknown, submit_operation

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
