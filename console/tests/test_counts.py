"""Every number the console prints, checked against the database: each count is marked
`data-count="<name>"` in the page, and a page with a count this file does not check fails
(a new count comes with its test)."""

from __future__ import annotations

import re

import pytest

from actions.execution.models import Action
from core.lifecycle import lifecycles
from messaging.models import D, Delivery
from operations.models import Operation, State

pytestmark = pytest.mark.django_db

COUNT = re.compile(r'data-count="([^"]+)">([^<]*)<')


def counts(text: str) -> dict[str, str]:
    return dict(COUNT.findall(text))


def rows_drawn(text: str) -> int:
    return text.count('<tr data-key="')


def test_the_home_counts_match_the_database_and_the_rows_drawn(staff_client, stuck_all):
    text = staff_client.get("/staff/").text
    printed = counts(text)
    expected = {"rows": str(len(stuck_all))}
    for lc in lifecycles():
        lifecycle, model, field = lc.name, lc.model, lc.status_field
        expected[f"{lifecycle}:total"] = f"{model.objects.count():,}"
        for key in printed:
            kind, _, status = key.partition(":")
            if kind == lifecycle and status != "total":
                expected[key] = str(model.objects.filter(**{field: status}).count())
    assert printed == expected
    assert printed["action:broadcast"] == "1" and printed["delivery:unknown"] == "1"
    assert printed["operation:needs_review"] == "1" and printed["action:total"] == "2"
    assert rows_drawn(text) == len(stuck_all)


def test_a_search_by_owner_counts_the_rows_it_draws(staff_client, stuck_all, user):
    text = staff_client.get("/staff/search/", {"q": "alice"}).text
    owned = (
        Action.objects.filter(user=user).count()
        + Delivery.objects.filter(created_by=user).count()
        + Operation.objects.filter(owner=user).count()
    )
    assert owned >= 3
    assert counts(text) == {"found": str(owned)}  # was "0 found" above the rows
    assert rows_drawn(text) == owned


def test_the_bulk_pages_count_legal_rows_and_outcomes(staff_client, make_delivery):
    unknown = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    queued = make_delivery()
    keys = [f"delivery:{unknown.pk}", f"delivery:{queued.pk}"]
    page = staff_client.post(
        "/staff/bulk/preview/", {"move": "delivery:resolve_failed", "key": keys}
    )
    assert counts(page.text) == {"legal": "1", "selected": "2"}
    page = staff_client.post(
        "/staff/bulk/apply/",
        {"move": "delivery:resolve_failed", "key": keys, "note": "checked with the provider"},
    )
    assert counts(page.text) == {"done": "1", "outcomes": "2"}
    assert Delivery.objects.get(pk=unknown.pk).status == D.FAILED
    assert Delivery.objects.get(pk=queued.pk).status == D.QUEUED


def test_a_filtered_home_counts_only_what_it_lists(staff_client, stuck_all):
    text = staff_client.get("/staff/", {"kind": "operation"}).text
    assert counts(text)["rows"] == "1" and rows_drawn(text) == 1
    assert Operation.objects.filter(state=State.NEEDS_REVIEW).count() == 1
