"""One trace from the API request through the on-commit task (a real Celery worker on the
broker) to the provider call and into every history row; beat's catch-up path continues the
trace of the request that queued the delivery."""

from __future__ import annotations

import json

import pytest

from core import tracing
from core.testing import start_celery_worker, wait_until
from messaging.models import D, Delivery
from messaging.providers.local_x import LocalXServer
from messaging.services import deliveries_process_due
from messaging.tests.factories import TOKEN_ENV, X_TOKEN

pytestmark = pytest.mark.django_db(transaction=True)

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"


def _trace_ids(delivery: Delivery) -> list[tuple[str, str]]:
    return list(delivery.history.values_list("status", "trace_id"))


def test_the_request_trace_reaches_the_worker_the_provider_and_the_history(
    post, dm_token, send_body, celery_test_queue, tmp_path
):
    log_path = tmp_path / "worker.log"
    with LocalXServer(token=X_TOKEN) as server:
        proc = start_celery_worker(
            queue=celery_test_queue,
            log_path=log_path,
            env={"X_API_BASE_URL": server.url, TOKEN_ENV: X_TOKEN, "LOG_FORMAT": "json"},
        )
        try:
            response = post("send", send_body, dm_token, HTTP_TRACEPARENT=PARENT)
            assert response.status_code == 202
            assert response["X-Request-ID"] == TRACE_ID
            delivery = Delivery.objects.get(pk=response.json()["action"]["id"])
            wait_until(lambda: Delivery.objects.get(pk=delivery.pk).status == D.SENT, timeout=60)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            proc.log.close()
    assert delivery.trace_id == TRACE_ID
    assert _trace_ids(delivery) == [
        ("queued", TRACE_ID),
        ("claimed", TRACE_ID),
        ("sending", TRACE_ID),
        ("sent", TRACE_ID),
    ]
    # The provider saw a span of the same trace (the worker's child, not the caller's span).
    [sent] = server.requests
    provider_span = tracing.parse(sent["traceparent"])
    assert provider_span.trace_id == TRACE_ID
    assert provider_span.span_id not in {"b7ad6b7169203331", response["traceparent"][36:52]}
    # The worker's own log lines (JSON, one per line) about this delivery carry the trace.
    records = [
        json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")
    ]
    about_it = [r for r in records if r.get("delivery_id") == str(delivery.pk)]
    assert about_it, records
    assert {r["trace_id"] for r in about_it} == {TRACE_ID}
    assert {r.get("task") for r in about_it} == {"messaging.tasks.delivery_deliver"}


def test_beat_catching_up_continues_the_trace_that_queued_the_delivery(
    x_server, post, dm_token, send_body
):
    # The on-commit task was lost (not run here): beat's pass picks the delivery up later, in
    # no trace of its own request.
    response = post("send", send_body, dm_token, HTTP_TRACEPARENT=PARENT)
    delivery = Delivery.objects.get(pk=response.json()["action"]["id"])
    with tracing.span():  # beat's task has a trace of its own
        beat_trace = tracing.current_trace_id()
        assert deliveries_process_due(worker_id="beat") == {D.SENT: 1}
    assert beat_trace != TRACE_ID
    assert _trace_ids(delivery) == [
        ("queued", TRACE_ID),
        ("claimed", TRACE_ID),
        ("sending", TRACE_ID),
        ("sent", TRACE_ID),
    ]
    assert tracing.parse(x_server.requests[0]["traceparent"]).trace_id == TRACE_ID


def test_support_sees_the_request_id_on_the_timeline_and_in_the_admin(
    staff_client, post, dm_token, send_body
):
    response = post("send", send_body, dm_token, HTTP_TRACEPARENT=PARENT)
    delivery = Delivery.objects.get(pk=response.json()["action"]["id"])
    timeline = staff_client.get(Delivery.lifecycle.timeline_url(delivery.pk))
    assert timeline.status_code == 200
    assert f'request <code title="{TRACE_ID}">{TRACE_ID}</code>' in timeline.content.decode()
    change = staff_client.get(Delivery.lifecycle.admin_url(delivery.pk))
    assert change.status_code == 200 and TRACE_ID in change.content.decode()
