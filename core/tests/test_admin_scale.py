"""Back-office pieces that keep the admin fast at millions of rows (core.admin): the
estimated-count paginator and the search-term shapes."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from eth_utils import to_checksum_address

import core.admin as picnic_admin
from actions.execution.models import Action
from actions.tests.factories import make_action
from core.admin import EstimatedCountPaginator, address_forms, search_term_kind


def _actions(user, application, n: int) -> None:
    for _ in range(n):
        make_action(user=user, application=application)


@pytest.mark.postgres
def test_a_large_unfiltered_list_says_about_the_estimated_count(
    staff_client, user, application, monkeypatch
):
    monkeypatch.setattr(picnic_admin, "COUNT_CAP", 5)
    _actions(user, application, 12)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE actions_action")  # reltuples: what the page reports
    page = staff_client.get("/admin/actions/action/")
    assert page.status_code == 200
    assert "about 12 actions" in page.text
    # Filtered past the cap: never counted to the end, and the page says so.
    page = staff_client.get("/admin/actions/action/", {"status__exact": "proposed"})
    assert "about 12 actions" in page.text or "more than 5 actions" in page.text


@pytest.mark.postgres
def test_the_paginator_counts_exactly_up_to_the_cap_then_estimates(user, application, monkeypatch):
    monkeypatch.setattr(picnic_admin, "COUNT_CAP", 5)
    _actions(user, application, 4)
    paginator = EstimatedCountPaginator(Action.objects.filter(status="proposed"), 2)
    assert (paginator.count, paginator.count_label) == (4, "4")
    _actions(user, application, 4)
    paginator = EstimatedCountPaginator(Action.objects.filter(status="proposed"), 2)
    assert paginator.count > 5
    assert paginator.count_label.startswith(("about ", "more than 5"))
    # Pages stop where OFFSET would get expensive, only when the count is not exact.
    monkeypatch.setattr(picnic_admin, "MAX_PAGES", 2)
    paginator = EstimatedCountPaginator(Action.objects.filter(status="proposed"), 2)
    assert paginator.num_pages == 2
    four = Action.objects.filter(pk__in=list(Action.objects.values_list("pk", flat=True)[:4]))
    assert EstimatedCountPaginator(four, 1).num_pages == 4


def test_sqlite_and_small_results_are_counted_exactly(staff_client, user, application):
    _actions(user, application, 3)
    page = staff_client.get("/admin/actions/action/")
    assert "3 actions" in page.text and "about 3" not in page.text
    paginator = EstimatedCountPaginator(Action.objects.all(), 2)
    assert (paginator.count, paginator.count_kind, paginator.count_label) == (3, "exact", "3")


def test_search_terms_are_recognised_by_shape():
    key = uuid.uuid4()
    assert search_term_kind(f" {key} ") == ("uuid", key)
    assert search_term_kind("0x" + "AB" * 32) == ("hash", "0x" + "ab" * 32)
    assert search_term_kind("0X" + "Ab" * 20) == ("address", "0x" + "ab" * 20)
    assert search_term_kind("0x" + "ab" * 31) == ("text", "0x" + "ab" * 31)
    assert search_term_kind("alice") == ("text", "alice")


def test_an_address_is_searched_in_both_spellings_it_may_be_stored_in():
    address = "0x" + "7a" * 20
    assert address_forms(address) == sorted({address, to_checksum_address(address)})


def test_the_row_checkbox_is_django_s_markup_without_a_template_render(user, application):
    from django.contrib import admin

    action = make_action(user=user, application=application)
    model_admin = admin.site._registry[Action]
    assert model_admin.action_checkbox(action) == admin.ModelAdmin.action_checkbox(
        model_admin, action
    )


@pytest.mark.parametrize(
    "url", ["/admin/actions/action/", "/admin/messaging/delivery/", "/admin/operations/operation/"]
)
def test_a_search_term_with_a_nul_finds_nothing_not_a_500(staff_client, url):
    # PostgreSQL text cannot hold a NUL: comparing with one would fail the query.
    page = staff_client.get(url, {"q": "alice\x00"})
    assert page.status_code == 200
    assert page.context["cl"].result_count == 0


def test_every_list_that_grows_with_use_estimates_its_count():
    """The tables with a row per payment, sign-in or state change: their admin pages must not
    count the whole table (no "N total", the estimating paginator)."""
    from django.contrib import admin
    from oauth2_provider.models import AccessToken, Grant, RefreshToken

    from actions.history.models import CardPurchase, HistoryEntry, TokenTransfer
    from mcp_adapter.models import McpTask
    from messaging.models import Delivery
    from operations.models import LedgerEntry, Operation

    growing = (Action, Delivery, Operation, McpTask, HistoryEntry, TokenTransfer, CardPurchase)
    for model in (*growing, LedgerEntry, AccessToken, RefreshToken, Grant):
        model_admin = admin.site._registry[model]
        assert isinstance(model_admin, picnic_admin.EstimatedCountMixin), model.__name__
        assert model_admin.show_full_result_count is False


@pytest.mark.postgres
def test_the_access_token_list_says_about_the_estimated_count(
    staff_client, user, application, make_token, monkeypatch
):
    monkeypatch.setattr(picnic_admin, "COUNT_CAP", 5)
    for _ in range(12):
        make_token(user, application)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE oauth2_provider_accesstoken")
    page = staff_client.get("/admin/oauth2_provider/accesstoken/")
    assert page.status_code == 200
    assert "about 12 access tokens" in page.text
    assert " total</a>" not in page.text  # no full count beside the search either
