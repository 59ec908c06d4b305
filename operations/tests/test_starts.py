"""Starts of one quote racing, an owner's cancel racing the backend's completion, and a result
read past its expiry. Billing invariants hold after every call, whichever wins."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from operations import billing
from operations.models import LedgerEntry, Operation, State, Wallet
from operations.services import (
    NotCancellable,
    QuoteInvalid,
    operation_cancel_by_owner,
    operation_check,
    operation_dispatch,
    operation_submit,
    operations_expire_details,
    quote_create,
)
from operations.tests.conftest import local_backend

THREADS = 20


def _checked(operation_id) -> None:
    operation = Operation.objects.get(pk=operation_id)
    assert billing.invariants(operation) == [], billing.invariants(operation)
    assert billing.wallet_invariants(Wallet.objects.get(owner_id=operation.owner_id)) == []


def _together(calls) -> list[object]:
    """Each call in its own thread and database connection, released at once."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(i, call):
        try:
            barrier.wait(timeout=20)
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - the assertions below read it
            results[i] = exc
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def _start(owner, quote, key):
    def call():
        operation = operation_submit(
            owner=owner,
            application=None,
            tool="text-gen",
            category="writing",
            channel="mcp",
            quote_id=quote.pk,
            idempotency_key=key,
        )
        _checked(operation.pk)  # after each start, in the thread that made it
        return operation

    return call


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_starts_of_one_quote_hold_once_on_postgres(funded, settings):
    settings.OPERATIONS_REVIEW_RULES = ["category:writing"]  # no dispatch: the hold stays
    quote = quote_create(owner=funded, tool="text-gen", submit_field="p", submit_value="Hi")
    results = _together([_start(funded, quote, str(uuid.uuid4())) for _ in range(THREADS)])
    started = [r for r in results if isinstance(r, Operation)]
    refused = [r for r in results if isinstance(r, QuoteInvalid)]
    assert len(started) == 1 and len(refused) == THREADS - 1, results
    assert all("was already used" in str(r) for r in refused)
    wallet = Wallet.objects.get(owner=funded)
    assert wallet.held_credits == quote.quoted_credits
    assert LedgerEntry.objects.filter(kind="hold").count() == 1
    _checked(started[0].pk)

    # The same key from twenty threads: one operation, returned to every one of them.
    again = quote_create(owner=funded, tool="text-gen", submit_field="p", submit_value="Hi")
    key = str(uuid.uuid4())
    results = _together([_start(funded, again, key) for _ in range(THREADS)])
    assert all(isinstance(r, Operation) for r in results), results
    assert len({r.pk for r in results}) == 1
    assert sum(not r.repeated for r in results) == 1
    assert Operation.objects.filter(quote=again).count() == 1
    assert LedgerEntry.objects.filter(kind="hold").count() == 2
    assert Wallet.objects.get(owner=funded).held_credits == 2 * quote.quoted_credits


@pytest.fixture
def quick_backend(settings):
    with local_backend(settings, work_seconds=0.3, timeout=2.0) as server:
        yield server


def _waiting(owner, application=None) -> Operation:
    operation = operation_submit(
        owner=owner, application=application, tool="text-gen", category="writing", input_text="Hi"
    )
    assert operation_dispatch(operation_id=operation.pk) == "waiting"
    return Operation.objects.get(pk=operation.pk)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_owners_cancel_racing_the_completion_keeps_the_books_on_postgres(quick_backend, funded):
    ends = set()
    for _round in range(5):
        operation = _waiting(funded)
        time.sleep(0.3)  # the backend may have finished: either may win

        def check(pk=operation.pk):
            return operation_check(operation_id=pk)

        def cancel(pk=operation.pk):
            return operation_cancel_by_owner(operation_id=pk, owner=funded, application=None)

        results = _together([check, cancel])
        # The loser stands down: the check as "raced"/"not_due", the cancel refused in words.
        errors = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(e, NotCancellable) for e in errors), results
        final = Operation.objects.get(pk=operation.pk)
        assert final.state in (State.SUCCEEDED, State.CANCELLED), final.state
        assert final.pending_credits == 0
        ends.add(final.state)
        _checked(final.pk)
    wallet = Wallet.objects.get(owner=funded)
    assert wallet.held_credits == 0
    assert billing.wallet_invariants(wallet) == []


@pytest.mark.django_db(transaction=True)
def test_a_cancel_after_the_backend_finished_settles_instead(quick_backend, funded):
    operation = _waiting(funded)
    time.sleep(0.5)  # done at the backend; its cancel answers with the completed response
    ended = operation_cancel_by_owner(
        operation_id=operation.pk, owner=funded, application=operation.application
    )
    assert ended.state == State.SUCCEEDED and ended.billing_status == "settled"
    _checked(ended.pk)


@pytest.mark.django_db(transaction=True)
def test_a_waiting_operation_is_cancelled_at_the_backend_and_released(settings, funded):
    with local_backend(settings, work_seconds=3600):
        operation = _waiting(funded)
        ended = operation_cancel_by_owner(
            operation_id=operation.pk, owner=funded, application=operation.application
        )
    assert ended.state == State.CANCELLED and ended.billing_status == "released"
    assert Wallet.objects.get(owner=funded).held_credits == 0
    _checked(ended.pk)
    with pytest.raises(NotCancellable, match="is cancelled"):
        operation_cancel_by_owner(
            operation_id=operation.pk, owner=funded, application=operation.application
        )


def test_the_result_is_read_until_it_expires_then_says_so(
    quick_backend, funded, application, ops_token, api, settings
):
    operation = _waiting(funded, application)
    time.sleep(0.5)
    assert operation_check(operation_id=operation.pk) == State.SUCCEEDED
    answer = api("get", f"operations/{operation.pk}/result", ops_token)
    assert answer.status_code == 200 and answer.json()["ready"] is True
    assert answer.json()["result"]["output_text"]
    # Past detail_expires_at: plainly expired, before and after the purge drops the output.
    past = timezone.now() - timedelta(seconds=1)
    Operation.objects.filter(pk=operation.pk).update(detail_expires_at=past)
    for _ in range(2):
        answer = api("get", f"operations/{operation.pk}/result", ops_token)
        assert answer.status_code == 410, answer.content
        body = answer.json()
        assert body["code"] == "result_expired"
        assert "expired at" in body["detail"] and "no longer kept" in body["detail"]
        operations_expire_details()
    assert Operation.objects.get(pk=operation.pk).result is None


def test_invalid_starts_are_4xx_with_the_reason_and_hold_nothing(
    funded, application, ops_token, api
):
    quote = quote_create(
        owner=funded, application=application, tool="text-gen", submit_field="p", submit_value="Hi"
    )
    bodies = [
        {"tool": "text-gen", "category": "c", "quote_id": str(quote.pk), "idempotency_key": ""},
        {"tool": "text-gen", "category": "c", "quote_id": str(quote.pk), "idempotency_key": "a b"},
        {"tool": "text-gen", "category": "c", "quote_id": "nope"},
        {"tool": "other", "category": "c", "quote_id": str(quote.pk)},
        {"tool": "text-gen", "category": "c", "quote_id": str(quote.pk), "channel": "mcp"},
        {"tool": "text-gen", "category": "c", "quote_id": str(quote.pk), "idempotency_key": 5},
        {"tool": "text-gen", "category": " ", "quote_id": str(quote.pk)},
    ]
    for body in bodies:
        response = api("post", "operations", ops_token, body)
        assert 400 <= response.status_code < 500, (body, response.content)
        assert response.json()["detail"], body
    assert Operation.objects.count() == 0
    assert Wallet.objects.get(owner=funded).held_credits == Decimal(0)
