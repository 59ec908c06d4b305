"""The deliveries back-office at scale: the same number of queries whatever the row count,
exact indexed searches, and the reason filter read from the latest failures."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from dev.testing import (
    admin_search,
    assert_change_page_bounds_history,
    assert_queries_do_not_grow,
    assert_reads_in_order_from,
)
from messaging.models import D, Delivery

URL = "/admin/messaging/delivery/"


def _failed(make_delivery, reason: str) -> Delivery:
    return make_delivery(D.CLAIMED, D.SENDING, D.FAILED, **{D.FAILED: {"reason": reason}})


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?status__exact=failed",
        "?stuck=yes",
        "?reason=refused",
        "?social_account__provider=x",
        "?q=acme",
        "?q=55",
    ],
)
def test_the_changelist_queries_do_not_grow_with_the_rows(staff_client, make_delivery, query):
    _failed(make_delivery, "refused")
    make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)

    def more():
        for n in range(6):
            _failed(make_delivery, "refused" if n % 2 else f"other {n}")
            make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)

    assert_queries_do_not_grow(staff_client, URL + query, more)


@pytest.mark.postgres
def test_the_stuck_filter_reads_its_page_newest_first_from_the_open_deliveries(
    staff_client, make_delivery
):
    """Every branch of "stuck" is an open status, so the list reads its newest page from the
    open deliveries' index in the list's order: not the whole created_at index filtered row by
    row (at 10M rows it walked 96,000 to find 50), nor every open delivery sorted."""
    make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    with CaptureQueriesContext(connection) as queries:
        assert staff_client.get(URL + "?stuck=yes").status_code == 200
    # The page's statement (with a page of rows or fewer, Django reads them without a LIMIT).
    (page,) = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith('SELECT "messaging_delivery".')
        and 'ORDER BY "messaging_delivery"."created_at" DESC, "messaging_delivery"."id" DESC'
        in q["sql"]
    ]
    assert_reads_in_order_from(page, "messaging_delivery", "delivery_open_created")


def test_the_change_page_queries_do_not_grow_with_the_history(
    staff_client, staff_user, make_delivery
):
    delivery = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    assert_change_page_bounds_history(staff_client, URL, delivery, staff_user=staff_user)


def _search(client, term: str) -> str:
    return admin_search(client, URL, term)


def test_each_id_search_finds_exactly_its_delivery(staff_client, make_delivery):
    target = make_delivery(
        D.CLAIMED, D.SENDING, D.SENT, **{D.SENT: {"provider_message_id": "1700000000042"}}
    )
    other = make_delivery(
        D.CLAIMED, D.SENDING, D.SENT, **{D.SENT: {"provider_message_id": "1700000000043"}}
    )
    for term in (str(target.pk), str(target.idempotency_key).upper(), "1700000000042"):
        text = _search(staff_client, term)
        assert str(target.pk) in text and str(other.pk) not in text
    assert str(target.pk) not in _search(staff_client, "17000000000")  # exact, not a prefix
    assert str(target.pk) not in _search(staff_client, str(uuid.uuid4()))


def test_search_by_handle_or_recipient_finds_the_account_s_deliveries(staff_client, make_delivery):
    delivery = make_delivery()
    assert str(delivery.pk) in _search(staff_client, "acme")  # the social account's handle
    assert str(delivery.pk) in _search(staff_client, "55")  # the recipient id
    assert str(delivery.pk) not in _search(staff_client, "acm")


def test_the_reason_filter_offers_the_latest_failures_and_selects_them(staff_client, make_delivery):
    refused = _failed(make_delivery, "Forbidden: blocked")
    other = _failed(make_delivery, "rate limited")
    page = staff_client.get(URL)
    assert "Forbidden: blocked" in page.text and "rate limited" in page.text
    page = staff_client.get(URL, {"reason": "Forbidden: blocked"})
    assert str(refused.pk) in page.text and str(other.pk) not in page.text
