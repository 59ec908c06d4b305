"""The actions back-office at scale: the same number of queries whatever the row count, and
searches that are exact lookups on indexed columns."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from eth_utils import to_checksum_address

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.tests.factories import make_action, user_op
from core.admin import HISTORY_INLINE_LIMIT
from core.lifecycle import Actor, transition
from dev.testing import (
    admin_search,
    assert_change_page_bounds_history,
    assert_queries_do_not_grow,
    assert_reads_in_order_from,
)

S = ActionStatus
ORDER = 'ORDER BY "actions_action"."created_at" DESC, "actions_action"."id" DESC'
URL = "/admin/actions/action/"


def _action(user, application, *steps, **overrides) -> Action:
    action = make_action(user=user, application=application, **overrides)
    for step in steps:
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    return Action.objects.get(pk=action.pk)


@pytest.mark.parametrize(
    "query", ["", "?status__exact=submitted", "?type__exact=transfer", "?stuck=yes", "?q=alice"]
)
def test_the_changelist_queries_do_not_grow_with_the_rows(
    staff_client, user, application, query, make_user
):
    _action(user, application, S.SIGNED, S.SUBMITTED)

    def more():
        for n in range(8):
            owner = make_user(f"owner{n}")
            _action(owner, application, S.SIGNED, S.SUBMITTED)
            _action(user, application, S.SIGNED, S.SUBMITTED)
        Action.objects.update(signed_at=timezone.now() - timedelta(hours=1))

    assert_queries_do_not_grow(staff_client, URL + query, more)


def test_the_change_page_queries_do_not_grow_with_the_history(
    staff_client, staff_user, user, application
):
    action = _action(user, application, S.SIGNED)
    # Staff notes, each by a user (no N+1).
    text = assert_change_page_bounds_history(
        staff_client, URL, action, staff_user=staff_user, extra=10
    )
    # Bounded: the latest rows, the oldest left to the live timeline.
    assert f"staff note {HISTORY_INLINE_LIMIT + 9}" in text
    assert "staff note 0<" not in text and "staff note 9<" not in text
    assert "all in the live timeline" in text


def _search(client, term: str) -> str:
    return admin_search(client, URL, term)


@pytest.mark.parametrize("spelling", ["lower", "checksum", "mixed"])
def test_search_by_smart_account_finds_it_in_the_spelling_it_is_stored_in(
    staff_client, user, application, spelling
):
    address = "0x" + "7a" * 20
    stored = {
        "lower": address,
        "checksum": to_checksum_address(address),
        "mixed": "0x" + "7A" * 10 + "7a" * 10,  # neither, as a careless import might store it
    }[spelling]
    target = _action(user, application, smart_account=stored)
    other = _action(user, application, smart_account="0x" + "7b" * 20)
    for term in (address, address.upper().replace("0X", "0x"), to_checksum_address(address)):
        text = _search(staff_client, term)
        assert str(target.pk) in text and str(other.pk) not in text


def _page_sql(client, query: str) -> str:
    """The statement that reads the changelist's page of actions for `query` (with one page of
    rows or fewer, Django reads them without a LIMIT: the order is still the index's)."""
    with CaptureQueriesContext(connection) as queries:
        assert client.get(URL + query).status_code == 200
    pages = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith('SELECT "actions_action".') and ORDER in q["sql"]
    ]
    assert len(pages) == 1, pages
    return pages[0]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "query, index",
    [
        # LOWER(smart_account) then the list's order, whatever the spelling searched (an IN
        # over two spellings sorted the account's whole history: 2 → 61 ms, 1M → 10M rows).
        ("?q=0x" + "7C" * 20, "action_account_created"),
        ("?q=0x" + "7c" * 20, "action_account_created"),
        ("?status__exact=submitted", "action_status_created"),
        ("?stuck=yes", "action_in_flight_created"),
    ],
)
def test_a_filtered_page_is_read_newest_first_from_an_index(
    staff_client, user, application, query, index
):
    """A search or a filter of rare rows reads its page of 50 from an index in the list's
    order (created_at, id, newest first): not all the matching rows read and sorted, which
    grew with them, nor the whole table's date order filtered row by row."""
    _action(user, application, S.SIGNED, S.SUBMITTED, smart_account="0x" + "7c" * 20)
    assert_reads_in_order_from(_page_sql(staff_client, query), "actions_action", index)


def test_search_by_hash_and_id_is_exact(staff_client, user, application):
    target = _action(user, application, S.SIGNED, S.SUBMITTED, user_op=user_op(nonce=5))
    other = _action(user, application, S.SIGNED, S.SUBMITTED)
    tx = "0x" + "cd" * 32
    Action.objects.filter(pk=target.pk).update(tx_hash=tx, block_number=7)
    for term in (str(target.pk), target.user_op_hash.upper().replace("0X", "0x"), tx):
        text = _search(staff_client, term)
        assert str(target.pk) in text and str(other.pk) not in text
    # A prefix of a hash is not a hash: exact means exact.
    text = _search(staff_client, target.user_op_hash[:20])
    assert str(target.pk) not in text


def test_search_by_username_or_email_is_exact(staff_client, user, other_user, application):
    mine = _action(user, application)
    theirs = _action(other_user, application)
    for term in ("alice", "ALICE@example.test"):
        text = _search(staff_client, term)
        assert str(mine.pk) in text and str(theirs.pk) not in text
    text = _search(staff_client, "alic")
    assert str(mine.pk) not in text


def test_the_stuck_filter_selects_in_flight_actions_signed_long_ago(
    staff_client, user, application, settings
):
    settings.ACTIONS_STUCK_AFTER_MINUTES = 10
    old = timezone.now() - timedelta(minutes=11)
    stuck = [
        _action(user, application, S.SIGNED),
        _action(user, application, S.SIGNED, S.SUBMITTED),
        _action(user, application, S.SIGNED, S.SUBMITTED, S.BROADCAST),
    ]
    ended = _action(user, application, S.SIGNED, S.SUBMITTED, S.FAILED)
    fresh = _action(user, application, S.SIGNED, S.SUBMITTED)
    Action.objects.exclude(pk=fresh.pk).update(signed_at=old)
    page = staff_client.get(URL, {"stuck": "yes"})
    assert all(str(a.pk) in page.text for a in stuck)
    assert str(ended.pk) not in page.text and str(fresh.pk) not in page.text
