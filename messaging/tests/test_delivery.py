"""The delivery worker's services against a local server speaking the X DM API."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone
from prometheus_client import REGISTRY

from chain.stack import free_port
from core import tracing
from core.lifecycle import Actor
from dev.providers.local_x import LocalXServer
from dev.testing import history_statuses
from messaging.models import D, Delivery
from messaging.services import delivery_transition
from messaging.tests.factories import X_TOKEN
from messaging.worker import (
    deliveries_claim,
    deliveries_process_due,
    deliveries_reap_leases,
    delivery_process,
)


def test_a_delivery_is_sent_once_with_the_provider_message_id(x_server, queue):
    delivery = queue()
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.SENT
    delivery.refresh_from_db()
    assert delivery.status == D.SENT
    assert delivery.provider_message_id.isdigit()
    assert delivery.reason is None
    assert delivery.conversation.provider_conversation_id == "1234567890-1000"
    assert history_statuses(delivery) == ["queued", "claimed", "sending", "sent"]
    assert x_server.requests == [
        {
            "path": "/2/dm_conversations/with/1234567890/messages",
            "auth": f"Bearer {X_TOKEN}",
            "traceparent": None,  # called outside any trace
            "text": "Your order shipped",
        }
    ]
    sent_row = delivery.history.get(status=D.SENT)
    assert sent_row.payload["data"]["dm_event_id"] == delivery.provider_message_id


def test_a_definitive_refusal_fails_with_the_providers_reason(x_server, queue):
    delivery = queue("[refuse] hello")
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.FAILED
    delivery.refresh_from_db()
    assert (
        delivery.reason == "Forbidden: You are not permitted to send Direct Messages to this user."
    )
    assert delivery.history.last().payload["status"] == 403


@pytest.mark.parametrize(
    ("marker", "reason"),
    [
        ("[hang]", "no answer within 1s after sending"),
        ("[drop]", "connection lost after sending"),
        ("[error]", "HTTP 503 after sending: Service Unavailable: Service Unavailable"),
    ],
)
def test_an_outcome_that_cannot_be_known_is_unknown_and_never_resent(
    x_server, queue, marker, reason
):
    delivery = queue(f"{marker} hello")
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.UNKNOWN
    delivery.refresh_from_db()
    assert delivery.status == D.UNKNOWN
    assert delivery.reason.startswith(reason)
    assert history_statuses(delivery) == ["queued", "claimed", "sending", "unknown"]
    assert "will not be re-sent" in delivery.history.last().detail
    # Nothing picks it up again, however often the workers run.
    assert deliveries_process_due(worker_id="w2") == {}
    assert delivery_process(delivery_id=delivery.pk, worker_id="w3") == "not_claimed"
    assert len(x_server.requests) == 1


def test_a_refused_connection_is_retried_within_claimed_and_sent_once(settings, queue):
    port = free_port()
    settings.X_API_BASE_URL = f"http://127.0.0.1:{port}"
    settings.DM_PROVIDER_TIMEOUT_SECONDS = 1.0
    settings.DM_RETRY_BACKOFF_SECONDS = 0.0
    delivery = queue()
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == "retry"
    delivery.refresh_from_db()
    assert delivery.status == D.CLAIMED
    assert delivery.attempts == 1 and "could not connect" in delivery.last_error
    assert delivery.lease_expires_at is None
    with LocalXServer(port=port, token=X_TOKEN) as server:
        assert deliveries_process_due(worker_id="w2") == {D.SENT: 1}
        assert len(server.requests) == 1
    delivery.refresh_from_db()
    assert delivery.status == D.SENT
    assert history_statuses(delivery) == ["queued", "claimed", "sending", "sent"]


def test_a_provider_unreachable_too_often_fails_without_sending(settings, queue):
    settings.X_API_BASE_URL = f"http://127.0.0.1:{free_port()}"
    settings.DM_MAX_CONNECT_ATTEMPTS = 2
    settings.DM_RETRY_BACKOFF_SECONDS = 0.0
    delivery = queue()
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == "retry"
    assert deliveries_process_due(worker_id="w1") == {D.FAILED: 1}
    delivery.refresh_from_db()
    assert delivery.status == D.FAILED
    assert delivery.reason.startswith("provider unreachable after 2 attempts, nothing was sent")


def test_a_missing_credential_fails_before_anything_is_sent(x_server, queue, monkeypatch):
    monkeypatch.delenv("PICNIC_TEST_X_TOKEN")
    delivery = queue()
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.FAILED
    delivery.refresh_from_db()
    assert (
        delivery.reason == "credential env:PICNIC_TEST_X_TOKEN is not configured; nothing was sent"
    )
    assert x_server.requests == []


def test_a_wrong_token_is_a_definitive_refusal(x_server, queue, monkeypatch):
    monkeypatch.setenv("PICNIC_TEST_X_TOKEN", "revoked")
    delivery = queue()
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.FAILED
    assert Delivery.objects.get(pk=delivery.pk).reason == "Unauthorized: Unauthorized"


def test_a_delivery_cancelled_while_connecting_is_not_sent(x_server, queue):
    delivery = queue()
    assert deliveries_claim(worker_id="w1", delivery_id=delivery.pk) == [delivery.pk]
    delivery_transition(delivery_id=delivery.pk, to=D.CANCELLED, actor=Actor.system())
    from messaging.worker import delivery_attempt

    assert delivery_attempt(delivery_id=delivery.pk, worker_id="w1") == "not_ours"
    assert x_server.requests == []


def test_the_reaper_marks_a_dead_workers_sending_delivery_unknown(queue):
    delivery = queue()
    for step in (D.CLAIMED, D.SENDING):
        delivery_transition(
            delivery_id=delivery.pk,
            to=step,
            actor=Actor.worker(),
            updates={
                "lease_owner": "dead",
                "lease_expires_at": timezone.now() - timedelta(seconds=1),
            },
        )
    assert deliveries_reap_leases() == 1
    delivery.refresh_from_db()
    assert delivery.status == D.UNKNOWN
    assert delivery.reason == "the worker stopped while sending; the outcome is unknown"
    assert delivery.history.last().actor_kind == "system"
    assert deliveries_reap_leases() == 0


def test_a_claim_held_by_a_live_lease_is_not_taken(queue):
    delivery = queue()
    assert deliveries_claim(worker_id="w1") == [delivery.pk]
    assert deliveries_claim(worker_id="w2") == []
    assert Delivery.objects.get(pk=delivery.pk).lease_owner == "w1"


def test_a_dead_workers_claim_is_taken_over_because_nothing_was_sent(queue):
    delivery = queue()
    assert deliveries_claim(worker_id="w1") == [delivery.pk]
    Delivery.objects.filter(pk=delivery.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert deliveries_claim(worker_id="w2") == [delivery.pk]
    delivery.refresh_from_db()
    assert (delivery.status, delivery.lease_owner) == (D.CLAIMED, "w2")
    assert history_statuses(delivery) == ["queued", "claimed"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_workers_never_claim_the_same_delivery(queue):
    created = {queue(f"message {n}").pk for n in range(10)}
    barrier = threading.Barrier(3)
    claims: dict[str, list] = {}

    def worker(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            claims[name] = deliveries_claim(worker_id=name, limit=10)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    everything = [pk for pks in claims.values() for pk in pks]
    assert len(everything) == len(set(everything))  # no double claim
    assert set(everything) == created
    for name, pks in claims.items():
        assert set(Delivery.objects.filter(pk__in=pks).values_list("lease_owner", flat=True)) <= {
            name
        }
    assert all(Delivery.objects.get(pk=pk).history.count() == 2 for pk in created)


@pytest.mark.postgres  # a transition is one statement there (core.lifecycle's CTE)
def test_one_send_through_the_task_costs_a_fixed_number_of_statements(
    x_server, queue, django_assert_num_queries
):
    from messaging.tasks import delivery_deliver

    first, second = queue("one"), queue("two")  # the same conversation
    # Outside the trace they were queued in (tested below: there a delivery is claimed before
    # it is read), the delivery with its account and conversation; claimed and sending in one statement
    # (the conditional UPDATE … RETURNING and both history rows, a data-modifying CTE: in
    # production no BEGIN/COMMIT), committed before the POST; then sent, one statement. The
    # first message of a conversation also stores the conversation's id.
    with django_assert_num_queries(4) as captured:
        assert delivery_deliver(str(first.pk)) == D.SENT
    assert [q["sql"].split()[0] for q in captured.captured_queries] == [
        "SELECT",
        "WITH",  # queued -> claimed -> sending
        "UPDATE",  # the conversation id
        "WITH",  # sending -> sent
    ]
    with django_assert_num_queries(3):
        assert delivery_deliver(str(second.pk)) == D.SENT
    assert history_statuses(second) == ["queued", "claimed", "sending", "sent"]
    assert len(x_server.requests) == 2


@pytest.fixture
def queue_traced(queue):
    """Queue a DM as a request does, in a trace of its own; its on-commit task then runs in
    that trace (`in_its_trace`), as the Celery instrumentation carries it to the worker."""

    def make(text: str = "Your order shipped") -> Delivery:
        with tracing.span(name="test.send"):
            return queue(text)

    return make


def in_its_trace(delivery: Delivery, worker_id: str = "w1", trace_id: str | None = None) -> str:
    with tracing.adopt(trace_id or delivery.trace_id):
        return delivery_process(delivery_id=delivery.pk, worker_id=worker_id)


def history_rows(delivery: Delivery) -> list[tuple]:
    return list(
        delivery.history.order_by("id").values_list(
            "from_status", "status", "detail", "actor_kind", "trace_id"
        )
    )


@pytest.fixture
def credential_resolved(x_server, queue):
    """This process has resolved the test account's credential once (a first delivery, read
    before it was claimed), so later ones may be claimed before they are read."""
    assert delivery_process(delivery_id=queue("first").pk, worker_id="w0") == D.SENT


@pytest.mark.postgres  # a guarded move is PostgreSQL's UPDATE … FROM
def test_a_delivery_worked_in_its_own_trace_costs_two_statements_and_tells_the_same_story(
    x_server, credential_resolved, queue, queue_traced, django_assert_num_queries
):
    read_first = queue_traced("read first")
    with tracing.adopt("0" * 31 + "1"):  # another trace: read, then claimed, as before
        assert delivery_process(delivery_id=read_first.pk, worker_id="w1") == D.SENT
    unread = queue_traced("unread")
    # The claim (queued -> claimed -> sending, reading the account and the conversation with
    # it, guarded by the credential and the trace), then the outcome: no read first.
    with django_assert_num_queries(2) as captured:
        assert in_its_trace(unread) == D.SENT
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["WITH", "WITH"]
    # Both tell the same story, each in its own trace.
    for delivery in (read_first, unread):
        rows = history_rows(delivery)
        assert [row[:2] for row in rows] == [
            (None, "queued"),
            ("queued", "claimed"),
            ("claimed", "sending"),
            ("sending", "sent"),
        ]
        assert [row[2] for row in rows[1:3]] == ["claimed by w1", "sending to x as w1"]
        assert rows[3][2].startswith("provider message id ")
        assert {row[4] for row in rows} == {delivery.trace_id}
        delivery.refresh_from_db()
        assert (delivery.status, delivery.lease_owner, delivery.lease_expires_at) == (
            D.SENT,
            "w1",
            None,
        )
        assert delivery.provider_message_id.isdigit()
    assert [r["text"] for r in x_server.requests] == ["first", "read first", "unread"]
    assert {r["auth"] for r in x_server.requests} == {f"Bearer {X_TOKEN}"}


@pytest.mark.postgres
def test_a_delivery_whose_credential_does_not_resolve_is_read_and_failed_from_claimed(
    x_server, credential_resolved, queue_traced, social_account, monkeypatch
):
    # The account now names a credential this process has never resolved (and cannot); the
    # one it resolved still does. The guarded claim must not take the delivery to `sending`.
    monkeypatch.delenv("PICNIC_TEST_MISSING", raising=False)
    social_account.credential_ref = "env:PICNIC_TEST_MISSING"
    social_account.save(update_fields=["credential_ref"])
    delivery = queue_traced("never sent")
    assert in_its_trace(delivery) == D.FAILED
    delivery.refresh_from_db()
    assert (
        delivery.reason == "credential env:PICNIC_TEST_MISSING is not configured; nothing was sent"
    )
    assert [row[:2] for row in history_rows(delivery)] == [
        (None, "queued"),
        ("queued", "claimed"),
        ("claimed", "failed"),
    ]
    assert [r["text"] for r in x_server.requests] == ["first"]


@pytest.mark.postgres
def test_a_delivery_cancelled_before_its_worker_is_not_claimed_unread(
    x_server, credential_resolved, queue_traced, django_assert_num_queries
):
    delivery = queue_traced("cancelled")
    delivery_transition(delivery_id=delivery.pk, to=D.CANCELLED, actor=Actor.system())
    assert in_its_trace(delivery) == "not_claimed"
    assert [row[:2] for row in history_rows(delivery)] == [
        (None, "queued"),
        ("queued", "cancelled"),
    ]
    assert [r["text"] for r in x_server.requests] == ["first"]


@pytest.mark.postgres
def test_a_provider_that_refuses_the_connection_is_asked_once_per_attempt(
    x_server, credential_resolved, queue_traced, settings
):
    settings.X_API_BASE_URL = f"http://127.0.0.1:{free_port()}"
    settings.DM_RETRY_BACKOFF_SECONDS = 0.0
    refused = {"provider": "x", "kind": "not_sent"}
    before = REGISTRY.get_sample_value("picnic_provider_errors_total", refused) or 0
    delivery = queue_traced("refused")
    assert in_its_trace(delivery) == "retry"
    # The connection opened before the delivery was read is the attempt's: one, not two.
    assert REGISTRY.get_sample_value("picnic_provider_errors_total", refused) == before + 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (D.CLAIMED, 1)
    assert [row[:2] for row in history_rows(delivery)] == [(None, "queued"), ("queued", "claimed")]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_workers_handed_the_same_delivery_in_its_trace_send_it_once(
    x_server, credential_resolved, queue_traced
):
    delivery = queue_traced("once")
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def worker(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            outcomes[name] = in_its_trace(delivery, worker_id=name)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(map(str, outcomes.values())) == ["not_claimed", "sent"]
    assert [r["text"] for r in x_server.requests] == ["first", "once"]
    assert [row[1] for row in history_rows(delivery)] == ["queued", "claimed", "sending", "sent"]


def test_a_late_real_answer_settles_a_delivery_the_reaper_marked_unknown(queue):
    from messaging.worker import _settle

    delivery = queue()
    for step in (D.CLAIMED, D.SENDING, D.UNKNOWN):
        delivery_transition(delivery_id=delivery.pk, to=step, actor=Actor.worker())
    outcome = _settle(
        delivery, D.SENT, reason=None, payload={}, detail="late", provider_message_id="9"
    )
    assert outcome == D.SENT
    delivery.refresh_from_db()
    assert (delivery.status, delivery.provider_message_id) == (D.SENT, "9")
    assert history_statuses(delivery)[-2:] == ["unknown", "sent"]
    assert delivery.history.last().from_status == D.UNKNOWN
    # A second answer finds it settled: nothing moves.
    assert _settle(delivery, D.FAILED, reason="x", payload={}, detail="late") == "raced"


def test_the_attempts_read_is_one_statement_and_the_same_as_select_related(
    queue, django_assert_num_queries
):
    from messaging.selectors import delivery_for_attempt

    delivery = queue("read me")
    orm = Delivery.objects.select_related("social_account", "conversation").get(pk=delivery.pk)
    with django_assert_num_queries(1):
        read = delivery_for_attempt(delivery_id=str(delivery.pk))
        # The related rows came with it: no query for them.
        assert read.social_account.credential_ref == orm.social_account.credential_ref
        assert read.conversation.recipient_id == orm.conversation.recipient_id
    for model_field in Delivery._meta.concrete_fields:
        name = model_field.attname
        assert getattr(read, name) == getattr(orm, name), name
    assert read._state.adding is False and read._state.db == orm._state.db
    assert delivery_for_attempt(delivery_id=str(uuid.uuid4())) is None
    assert delivery_for_attempt(delivery_id="not a uuid") is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_deliverys_events_leave_in_two_writes_sending_before_the_provider_call(
    x_server, queue, monkeypatch
):
    from core import events

    sent: list[list[dict]] = []
    real = events._send

    asked: list[int] = []  # how many DMs the provider had received at each publish

    def spy(batch, **kwargs):
        sent.append([dict(event) for event in batch])
        asked.append(len(x_server.requests))
        return real(batch, **kwargs)

    monkeypatch.setattr(events, "_send", spy)
    delivery = queue("one trip")
    assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.SENT
    assert [[e["status"] for e in batch] for batch in sent] == [["claimed", "sending"], ["sent"]]
    assert {e["id"] for batch in sent for e in batch} == {str(delivery.pk)}
    assert asked == [0, 1]  # `sending` went out before the provider was asked
    assert history_statuses(delivery) == ["queued", "claimed", "sending", "sent"]
