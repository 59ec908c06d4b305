"""Operations end to end against a local backend speaking the OpenAI Responses API."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone
from jsonschema import Draft7Validator, FormatChecker

from chain.stack import free_port
from dev.providers.local_openai import LocalResponsesServer
from dev.testing import history_statuses, wait_until
from operations import billing
from operations.contract import OPERATION_STATUS_SCHEMA
from operations.decisions import (
    operation_pause,
    operation_resume,
    operation_review_decide,
)
from operations.errors import AdmissionError, InsufficientCredits, QuoteInvalid
from operations.models import LedgerEntry, Operation, Quote, State, Wallet
from operations.serializers import operation_status_payload
from operations.services import (
    backend_unreachable,
    operation_cancel_by_owner,
    operation_check,
    operation_dispatch,
    operation_reconcile,
    operation_submit,
    operations_expire_details,
    operations_process_due,
    quote_create,
)

from .conftest import API_KEY

VALIDATOR = Draft7Validator(OPERATION_STATUS_SCHEMA, format_checker=FormatChecker())


def payload(operation) -> dict:
    body = operation_status_payload(Operation.objects.get(pk=operation.pk))
    errors = [f"{list(e.path)}: {e.message}" for e in VALIDATOR.iter_errors(body)]
    assert errors == [], errors
    return body


def submit(owner, application=None, text="Write a haiku about picnics", **kwargs) -> Operation:
    return operation_submit(
        owner=owner,
        application=application,
        tool=kwargs.pop("tool", "text-gen"),
        category=kwargs.pop("category", "writing"),
        input_text=text,
        **kwargs,
    )


def run_to_completion(operation) -> Operation:
    wait_until(
        lambda: (
            operation_check(operation_id=operation.pk)
            in ("succeeded", "failed", "cancelled", "not_due")
            and Operation.objects.get(pk=operation.pk).is_terminal
        ),
        timeout=30,
        interval=0.1,
    )
    return Operation.objects.get(pk=operation.pk)


def test_the_happy_path_dispatches_waits_generates_and_settles(backend_server, funded, application):
    op = submit(funded, application)
    body = payload(op)
    assert (body["state"], body["status"], body["stage"], body["dispatch_status"]) == (
        "queued",
        "accepted",
        "dispatch",
        "pending",
    )
    assert body["billing"]["status"] == "pending"
    held = op.held_credits
    assert body["billing"]["pending_credits"] == billing.fmt(held)
    assert Wallet.objects.get(owner=funded).held_credits == held

    assert operation_dispatch(operation_id=op.pk) == "waiting"
    body = payload(op)
    assert (body["state"], body["status"], body["stage"], body["dispatch_status"]) == (
        "waiting",
        "running",
        "generation",
        "acknowledged",
    )
    assert body["timing"]["dispatch_acknowledgement_ms"] >= 0
    assert backend_server.creates[0]["key"] == str(op.pk)

    op = run_to_completion(op)
    body = payload(op)
    assert (body["state"], body["status"], body["stage"]) == ("succeeded", "succeeded", "complete")
    assert body["result"]["output_text"].startswith("Generated for: Write a haiku")
    assert body["error"] is None
    # 1000 fresh input × 0.5 + 200 cached × 0.1 → 0.52; 300 reasoning × 2 → 0.6; 500 output × 1.5 → 0.75
    assert body["billing"]["usage_credits"] == "1.870000"
    assert body["billing"]["wallet_debited_credits"] == "1.870000"
    assert body["billing"]["released_credits"] == billing.fmt(held - Decimal("1.87"))
    assert body["billing"]["pending_credits"] == "0.000000"
    assert body["billing"]["status"] == "settled"
    assert body["billing"]["tokens"] == {
        "input": 1200,
        "output": 800,
        "cached": 200,
        "cache_write": 0,
    }
    kinds = {c["kind"]: c["usage_credits"] for c in body["billing"]["components"]}
    assert kinds == {"text_pool": "0.520000", "reasoning": "0.600000", "generation": "0.750000"}
    assert body["timing"]["end_to_end_ms"] >= body["timing"]["dispatch_acknowledgement_ms"]
    assert body["detail_expires_at"] is not None and body["detail_expired"] is False
    assert "running" in history_statuses(op) or "waiting" in history_statuses(op)
    wallet = Wallet.objects.get(owner=funded)
    assert wallet.available_credits == Decimal("100") - Decimal("1.87")
    assert wallet.held_credits == 0


def test_a_lost_acknowledgement_is_reconciled_with_the_same_idempotency_key(backend_server, funded):
    op = submit(funded, text="[lose-ack] a long essay")
    assert operation_dispatch(operation_id=op.pk) == "reconciling"
    body = payload(op)
    assert (body["state"], body["status"], body["stage"], body["dispatch_status"]) == (
        "reconciling",
        "reconciling",
        "reconciliation",
        "unknown",
    )
    assert body["billing"]["status"] == "reconciling"
    assert body["timing"]["acknowledged_at"] is None
    assert operation_reconcile(operation_id=op.pk) in ("waiting", "running")
    body = payload(op)
    assert body["dispatch_status"] == "acknowledged"
    # The backend got it once: the second POST found the same response by its key.
    assert len(backend_server.responses) == 1 and len(backend_server.creates) == 2
    assert {c["key"] for c in backend_server.creates} == {str(op.pk)}
    op = run_to_completion(op)
    assert op.state == State.SUCCEEDED and op.billing_status == "settled"
    assert history_statuses(op)[:3] == ["queued", "reconciling", history_statuses(op)[2]]


def test_a_backend_that_hangs_leaves_the_operation_reconciling_until_it_answers(
    backend_server, funded, settings
):
    op = submit(funded, text="[hang] please")
    assert operation_dispatch(operation_id=op.pk) == "reconciling"
    hung = Operation.objects.get(pk=op.pk)
    # It may have been accepted: an unknown outcome, not an unreachable backend.
    assert "no answer within 1s" in hung.last_error and not backend_unreachable(hung)
    settings.OPERATIONS_BACKEND_URL = f"http://127.0.0.1:{free_port()}"  # backend now down
    assert operation_reconcile(operation_id=op.pk) == "still_reconciling"
    down = Operation.objects.get(pk=op.pk)
    assert down.state == State.RECONCILING and backend_unreachable(down)
    assert "could not connect" in down.last_error


def test_a_failed_generation_fails_and_releases_the_hold(backend_server, funded):
    op = submit(funded, text="[fail] doomed")
    operation_dispatch(operation_id=op.pk)
    op = run_to_completion(op)
    body = payload(op)
    assert (body["state"], body["error"]) == ("failed", {"code": "server_error"})
    assert body["billing"]["status"] == "released"
    assert body["billing"]["released_credits"] == billing.fmt(op.held_credits)
    assert body["billing"]["wallet_debited_credits"] == "0.000000"
    assert Wallet.objects.get(owner=funded).available_credits == Decimal("100")


def test_a_rejected_dispatch_fails_with_the_backends_code(backend_server, funded):
    op = submit(funded, text="[reject] bad input")
    assert operation_dispatch(operation_id=op.pk) == "failed"
    body = payload(op)
    assert body["error"] == {"code": "invalid_value"}
    assert body["dispatch_status"] == "pending" and body["billing"]["status"] == "released"


def test_a_refused_connection_keeps_it_queued_and_retries(settings, funded):
    port = free_port()
    settings.OPERATIONS_BACKEND_URL = f"http://127.0.0.1:{port}"
    settings.OPERATIONS_BACKEND_API_KEY = API_KEY
    settings.OPERATIONS_POLL_SECONDS = 0.0
    op = submit(funded)
    assert operation_dispatch(operation_id=op.pk) == "retry"
    down = Operation.objects.get(pk=op.pk)
    # Nothing was sent: nothing to reconcile, still queued and pending, the hold kept.
    assert (down.state, down.dispatch_status, down.billing_status) == (
        State.QUEUED,
        "pending",
        "pending",
    )
    assert backend_unreachable(down) and "could not connect" in down.last_error
    assert history_statuses(op) == ["queued"]
    with LocalResponsesServer(port=port, api_key=API_KEY, work_seconds=0.0) as server:
        assert operations_process_due() == {"succeeded": 1}
        assert len(server.creates) == 1
    assert payload(op)["state"] == "succeeded"
    assert Operation.objects.get(pk=op.pk).last_error == ""


def test_an_operation_never_sent_to_a_down_backend_is_the_owners_to_cancel(settings, funded):
    settings.OPERATIONS_BACKEND_URL = f"http://127.0.0.1:{free_port()}"  # nobody listens
    settings.OPERATIONS_POLL_SECONDS = 0.0
    op = submit(funded)
    assert operation_dispatch(operation_id=op.pk) == "retry"
    ended = operation_cancel_by_owner(operation_id=op.pk, owner=funded, application=None)
    assert (ended.state, ended.billing_status, ended.dispatch_status) == (
        State.CANCELLED,
        "released",
        "pending",
    )
    assert history_statuses(op) == ["queued", "cancelled"]
    assert Wallet.objects.get(owner=funded).available_credits == Decimal("100")


def test_review_approve_continues_and_reject_cancels_and_releases(
    backend_server, funded, staff_user
):
    approved = submit(funded, category="sensitive")
    body = payload(approved)
    assert (body["state"], body["status"], body["stage"]) == (
        "needs_review",
        "needs_review",
        "review",
    )
    assert body["review"]["rule"] == "category:sensitive" and body["review"]["decision"] is None
    assert (
        operation_dispatch(operation_id=approved.pk) == "not_due"
    )  # nothing goes out before review
    with pytest.raises(ValueError, match="note is required"):
        operation_review_decide(
            operation_id=approved.pk, staff_user=staff_user, approve=True, note=" "
        )
    operation_review_decide(
        operation_id=approved.pk, staff_user=staff_user, approve=True, note="fine"
    )
    body = payload(approved)
    assert (body["state"], body["stage"]) == ("queued", "dispatch")
    # Decided: nobody must intervene any more, so `review` is null (seed 003); the decision
    # is in the history row.
    assert body["review"] is None
    row = Operation.objects.get(pk=approved.pk).history.last()
    assert (row.actor_kind, row.actor_user, row.detail) == (
        "staff",
        staff_user,
        "approved by staff sam: fine",
    )
    assert row.payload["review"]["decision"] == "approved"
    assert row.payload["review"]["decided_by"] == "sam"
    assert operation_dispatch(operation_id=approved.pk) == "waiting"

    rejected = submit(funded, category="sensitive")
    operation_review_decide(
        operation_id=rejected.pk, staff_user=staff_user, approve=False, note="not allowed"
    )
    body = payload(rejected)
    assert (body["state"], body["billing"]["status"]) == ("cancelled", "released")
    assert body["billing"]["released_credits"] == billing.fmt(rejected.held_credits)


def test_pause_and_resume_by_staff(backend_server, funded, staff_user):
    op = submit(funded)
    operation_pause(operation_id=op.pk, staff_user=staff_user)
    body = payload(op)
    assert (body["state"], body["status"], body["stage"]) == ("paused", "paused", "dispatch")
    assert operations_process_due() == {}  # a paused operation is left alone
    operation_resume(operation_id=op.pk, staff_user=staff_user)
    assert payload(op)["state"] == "queued"
    assert operation_dispatch(operation_id=op.pk) == "waiting"
    operation_pause(operation_id=op.pk, staff_user=staff_user)
    assert payload(op)["stage"] == "generation"
    operation_resume(operation_id=op.pk, staff_user=staff_user)
    assert run_to_completion(op).state == State.SUCCEEDED


def test_insufficient_credits_refuse_admission_and_change_nothing(user):
    billing.wallet_grant(owner=user, amount=Decimal("0.5"))
    with pytest.raises(InsufficientCredits, match="needs a hold of"):
        submit(user)
    assert Operation.objects.count() == 0
    assert LedgerEntry.objects.filter(kind="hold").count() == 0
    assert Wallet.objects.get(owner=user).available_credits == Decimal("0.5")


def _quoted_submit(owner, prompt: str, *, limit: int, model: str | None = None):
    """A quote for `prompt` with `max_output_tokens` = `limit`, and the operation started on it."""
    extra = {"model": model} if model else {}
    quote = quote_create(
        owner=owner,
        tool="text-gen",
        submit_field="prompt",
        submit_value=prompt,
        configuration={"max_output_tokens": limit},
        **extra,
    )
    return quote, submit(owner, text=None, quote_id=quote.pk)


def test_a_quote_sets_the_hold_and_is_shown_and_single_use(backend_server, funded):
    quote, op = _quoted_submit(funded, "Summarise this", limit=100, model="gpt-5-nano")
    assert op.held_credits == quote.quoted_credits
    body = payload(op)
    assert body["quote"]["id"] == str(quote.pk) and body["quote"]["operation_id"] == str(op.pk)
    assert body["quote"]["quoted_credits"] == billing.fmt(quote.quoted_credits)
    assert body["quote"]["submit_field"] == "prompt"
    with pytest.raises(QuoteInvalid, match="already used"):
        submit(funded, text=None, quote_id=quote.pk)


def test_expired_or_foreign_quotes_are_refused(funded, other_user):
    quote = quote_create(owner=funded, tool="text-gen", submit_field="prompt", submit_value="x")
    Quote.objects.filter(pk=quote.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(QuoteInvalid, match="expired"):
        submit(funded, text=None, quote_id=quote.pk)
    with pytest.raises(QuoteInvalid, match="Quote not found"):
        submit(other_user, text=None, quote_id=quote.pk)
    with pytest.raises(AdmissionError, match="input is required"):
        submit(funded, text=None)


def _ledger(op) -> list[tuple[str, Decimal]]:
    return list(
        LedgerEntry.objects.filter(operation=op)
        .order_by("created_at", "id")
        .values_list("kind", "amount")
    )


def test_an_overrun_is_billed_at_most_the_hold_and_the_rest_written_off(backend_server, user):
    """A quote caps the bill: 0.05 credits, a quote for 16 output tokens, a backend that answers 800
    anyway: the charge is the hold, never the wallet's other credits."""
    billing.wallet_grant(owner=user, amount=Decimal("0.05"))
    quote = quote_create(
        owner=user,
        tool="text-gen",
        submit_field="prompt",
        submit_value="hi [overrun]",
        configuration={"max_output_tokens": 16},
    )
    hold = quote.quoted_credits
    assert Decimal(0) < hold < Decimal("0.05")
    op = submit(user, text=None, quote_id=quote.pk)
    operation_dispatch(operation_id=op.pk)
    op = run_to_completion(op)
    # The quoted limit reached the backend, in the Responses API's field.
    assert [c["max_output_tokens"] for c in backend_server.creates] == [16]
    assert op.state == State.SUCCEEDED and op.tokens["output"] == 800
    assert op.usage_credits == Decimal("1.87")
    assert op.wallet_debited_credits == hold
    assert op.unfunded_credits == Decimal("1.87") - hold
    assert (op.pending_credits, op.released_credits) == (0, 0)
    assert _ledger(op) == [
        ("hold", hold),
        ("debit", hold),
        ("write_off", Decimal("1.87") - hold),
    ]
    wallet = Wallet.objects.get(owner=user)
    assert (wallet.available_credits, wallet.held_credits) == (Decimal("0.05") - hold, 0)
    assert not LedgerEntry.objects.filter(wallet=wallet, available_after__lt=0).exists()
    assert billing.invariants(op) == [] and billing.wallet_invariants(wallet) == []
    body = payload(op)
    assert body["billing"]["wallet_debited_credits"] == billing.fmt(hold)
    assert body["billing"]["unfunded_credits"] == billing.fmt(Decimal("1.87") - hold)
    assert history_statuses(op)[-1] == "succeeded"


def test_reconciliation_sends_the_quoted_limit_again(backend_server, funded):
    """The create body is the same on dispatch and reconciliation: the limit too."""
    quote, op = _quoted_submit(funded, "[lose-ack] an essay", limit=1000)
    assert op.max_output_tokens == 1000
    assert operation_dispatch(operation_id=op.pk) == "reconciling"
    assert operation_reconcile(operation_id=op.pk) in ("waiting", "running")
    assert [c["max_output_tokens"] for c in backend_server.creates] == [1000, 1000]
    op = run_to_completion(op)
    assert op.state == State.SUCCEEDED and op.wallet_debited_credits <= op.held_credits


def test_an_answer_cut_at_the_quoted_limit_is_incomplete_and_billed_within_the_hold(
    backend_server, funded
):
    quote, op = _quoted_submit(funded, "Summarise this", limit=100)
    operation_dispatch(operation_id=op.pk)
    op = run_to_completion(op)
    assert backend_server.creates[0]["max_output_tokens"] == 100
    assert (op.state, op.error_code) == (State.FAILED, "max_output_tokens")
    assert op.result["incomplete_reason"] == "max_output_tokens"
    assert op.tokens["output"] == 100
    # 0.52 input + 100 reasoning tokens × 2 / 1000: past the 0.2015 hold (the input was
    # estimated at 3 tokens, the backend counted 1,200), so the hold is all that is charged.
    assert op.usage_credits == Decimal("0.72")
    assert op.wallet_debited_credits == op.held_credits == quote.quoted_credits
    assert op.unfunded_credits == Decimal("0.72") - op.held_credits
    assert [kind for kind, _ in _ledger(op)] == ["hold", "debit", "write_off"]
    wallet = Wallet.objects.get(owner=funded)
    assert wallet.held_credits == 0
    assert wallet.available_credits == Decimal("100") - op.held_credits
    assert history_statuses(op)[-1] == "failed"


def test_without_a_quote_the_default_limit_is_sent(backend_server, funded, settings):
    op = submit(funded)
    assert op.max_output_tokens == settings.OPERATIONS_MAX_OUTPUT_TOKENS
    operation_dispatch(operation_id=op.pk)
    assert backend_server.creates[0]["max_output_tokens"] == settings.OPERATIONS_MAX_OUTPUT_TOKENS


def test_details_expire_but_the_record_remains(backend_server, funded):
    op = submit(funded)
    operation_dispatch(operation_id=op.pk)
    op = run_to_completion(op)
    assert operations_expire_details() == 0
    Operation.objects.filter(pk=op.pk).update(
        detail_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert operations_expire_details() == 1
    body = payload(op)
    assert body["detail_expired"] is True
    assert body["result"] is None and body["review"] is None
    assert body["state"] == "succeeded" and body["billing"]["usage_credits"] == "1.870000"


def test_the_database_refuses_an_inconsistent_state_status_stage(funded):
    op = submit(funded)
    for bad in ({"status": "running"}, {"stage": "complete"}, {"state": "succeeded"}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Operation.objects.filter(pk=op.pk).update(**bad)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("1.25"), "1.250000"),
        (0, "0.000000"),
        (Decimal("0.0000005"), "0.000001"),
        (Decimal("12345.6789"), "12345.678900"),
        ("2", "2.000000"),
    ],
)
def test_credits_are_strings_with_exactly_six_decimals(value, text):
    assert billing.fmt(value) == text


def test_the_api_submits_and_reports_with_the_seed_schema(backend_server, funded, ops_token, api):
    response = api(
        "post",
        "operations",
        ops_token,
        {"tool": "text-gen", "category": "writing", "input": "Hello"},
    )
    assert response.status_code == 202
    body = response.json()
    # A token with no MCP audience is an API call (the channel comes from the token).
    assert body["channel"] == "api" and body["state"] == "queued"
    status = api("get", f"operations/{body['id']}", ops_token)
    assert status.status_code == 200
    assert not list(VALIDATOR.iter_errors(status.json()))


def test_the_api_refuses_bad_input_and_missing_credits(user, ops_token, api):
    assert (
        api(
            "post",
            "operations",
            ops_token,
            {"tool": "t", "category": "c", "input": "x", "bogus": 1},
        ).status_code
        == 400
    )
    assert (
        api(
            "post",
            "operations",
            ops_token,
            {"tool": "t", "category": "c", "input": "x", "channel": "fax"},
        ).status_code
        == 400
    )
    response = api("post", "operations", ops_token, {"tool": "t", "category": "c", "input": "x"})
    assert response.status_code == 402 and "needs a hold of" in response.json()["detail"]
    response = api(
        "post",
        "operations",
        ops_token,
        {"tool": "t", "category": "c", "quote_id": str(uuid.uuid4())},
    )
    assert response.status_code == 422 and response.json()["detail"].startswith("Quote not found")


def test_another_owners_operation_is_invisible(funded, other_user, application, make_token, api):
    op = submit(funded)
    theirs = make_token(other_user, application, scope="operations:read")
    probe = api("get", f"operations/{op.pk}", theirs)
    missing = api("get", f"operations/{uuid.uuid4()}", theirs)
    assert probe.status_code == missing.status_code == 404
    assert probe.json()["detail"] == f"Operation not found: {op.pk}"


def test_the_status_needs_operations_read(funded, user, application, make_token, api):
    op = submit(funded)
    response = api(
        "get", f"operations/{op.pk}", make_token(user, application, scope="operations:write")
    )
    assert response.status_code == 403 and response.json()["required_scopes"] == ["operations:read"]


def test_a_quote_over_the_api(funded, ops_token, api):
    response = api(
        "post",
        "quotes",
        ops_token,
        {
            "tool": "text-gen",
            "submit_field": "prompt",
            "submit_value": "hello",
            "configuration": {"max_output_tokens": 50},
        },
    )
    assert response.status_code == 201
    body = response.json()
    assert body["quoted_credits"] == billing.fmt(
        billing.estimate(input_text="hello", max_output_tokens=50)
    )
