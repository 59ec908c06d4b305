"""Quotes and submissions against careless or hostile input: a 4xx in the one error
body naming the field, never a negative price, never a database constraint hit (a 500)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from operations.models import LedgerEntry, Operation, Quote

pytestmark = pytest.mark.django_db

QUOTE = {"tool": "image", "submit_field": "prompt", "submit_value": "a cat"}


def _counts():
    return Quote.objects.count(), Operation.objects.count(), LedgerEntry.objects.count()


@pytest.mark.parametrize("value", [-1_000_000, 0, 15, "abc", [1], 1e30, 1.5, True])
def test_a_quote_refuses_max_output_tokens_out_of_range(funded, ops_token, api, value):
    before = _counts()
    body = {**QUOTE, "configuration": {"max_output_tokens": value}}
    response = api("post", "quotes", ops_token, body)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_input"
    assert list(response.json()["errors"]) == ["configuration.max_output_tokens"]
    assert _counts() == before


def test_a_quote_refuses_a_number_that_is_not_finite(funded, ops_token, client):
    before = _counts()
    raw = '{"tool": "image", "submit_field": "prompt", "submit_value": "a cat", '
    raw += '"configuration": {"max_output_tokens": 1e400}}'  # parses to inf
    response = client.post(
        "/api/v1/quotes",
        raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {ops_token.token}",
    )
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == {
        "configuration.max_output_tokens": ["must be a finite number"]
    }
    assert _counts() == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool", "t" * 101),  # the column holds 100
        ("tool", "a\x00b"),
        ("category", "\ud800"),
        ("model", "m" * 101),
        ("input", "x\x00"),
    ],
)
def test_a_submission_refuses_what_the_columns_cannot_hold(funded, ops_token, api, field, value):
    before = _counts()
    body = {"tool": "image", "category": "art", "input": "a cat", field: value}
    response = api("post", "operations", ops_token, body)
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]
    assert _counts() == before


def test_a_quote_configuration_cannot_carry_nul_anywhere(funded, ops_token, api):
    body = {**QUOTE, "configuration": {"style": {"a\x00": 1}}}
    response = api("post", "quotes", ops_token, body)
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "configuration.style": ["a key must not contain NUL characters (U+0000)"]
    }


def test_a_stored_negative_quote_cannot_reach_the_ledger(funded, user, application, ops_token, api):
    from django.utils import timezone

    # A quote priced before prices were checked: submitting it is refused, not a 500.
    quote = Quote.objects.create(
        owner=user,
        application=application,
        tool="image",
        submit_field="prompt",
        submit_value="a cat",
        quoted_credits=Decimal("-1999.999500"),
        expires_at=timezone.now() + timezone.timedelta(minutes=5),
    )
    before = _counts()
    body = {"tool": "image", "category": "art", "quote_id": str(quote.pk)}
    response = api("post", "operations", ops_token, body)
    assert response.status_code == 422, response.content
    assert response.json() == {
        "detail": f"Quote {quote.pk} has a negative price; ask for a new quote",
        "code": "quote_invalid",
        "errors": {},
    }
    assert _counts() == before


def test_the_service_refuses_a_negative_budget_without_the_schema(funded, user):
    from operations.errors import QuoteInvalid
    from operations.services import quote_create

    with pytest.raises(QuoteInvalid, match="between 16 and"):
        quote_create(
            owner=user,
            tool="image",
            submit_field="prompt",
            submit_value="a cat",
            configuration={"max_output_tokens": -1_000_000},
        )
    assert Quote.objects.count() == 0
