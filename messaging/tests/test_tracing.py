"""One trace from the API request through the on-commit task (a real Celery worker on the
broker) to the provider call and into every history row; beat's catch-up path continues the
trace of the request that queued the delivery."""

from __future__ import annotations

import json
import uuid

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from chain.stack import free_port
from core import tracing
from dev import processes
from dev.providers.local_x import LocalXServer
from dev.testing import (
    OtlpReceiver,
    process_env,
    start_celery_worker,
    stop_celery_worker,
    wait_until,
)
from messaging.models import D, Delivery
from messaging.tests.factories import TOKEN_ENV, X_TOKEN
from messaging.worker import deliveries_process_due

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
            stop_celery_worker(proc)
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


def test_with_opentelemetry_one_agent_call_is_one_trace_of_spans_across_processes(
    dm_token, send_body, tmp_path
):
    """The web (gunicorn), the worker (Celery) and the provider call each export their spans
    to a local OTLP/HTTP collector; the API call's trace id is the spans' trace id, the
    history rows' and the log lines'."""
    prefix = f"otel-{uuid.uuid4().hex[:8]}."  # the web routes the task to `{prefix}dm`
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with OtlpReceiver() as collector, LocalXServer(token=X_TOKEN) as provider:
        common = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not the 5 s default
            "CELERY_QUEUE_PREFIX": prefix,
            "LOG_FORMAT": "json",
            "PICNIC_VAR_DIR": str(tmp_path / "var"),
        }
        web = processes.gunicorn(
            process_env(
                {
                    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
                    "OTEL_SERVICE_NAME": "picnic-web",
                    **common,
                }
            ),
            tmp_path / "web.log",
            bind=f"127.0.0.1:{port}",
        ).start()
        worker = start_celery_worker(
            queue=f"{prefix}dm",
            log_path=tmp_path / "worker.log",
            env={
                "X_API_BASE_URL": provider.url,
                TOKEN_ENV: X_TOKEN,
                "OTEL_SERVICE_NAME": "picnic-worker",
                **common,
            },
        )
        try:
            wait_until(lambda: processes.answers(f"{base}/healthz"), timeout=60)
            status, headers, body = processes.http(
                "POST",
                f"{base}/private-messaging-api/actions/send",
                body=send_body,
                token=dm_token.token,
                headers={"traceparent": PARENT},
            )
            assert status == 202, body
            assert headers["X-Request-ID"] == TRACE_ID
            delivery = Delivery.objects.get(pk=json.loads(body)["action"]["id"])
            wait_until(lambda: Delivery.objects.get(pk=delivery.pk).status == D.SENT, timeout=60)
            kinds = {Span.SPAN_KIND_SERVER, Span.SPAN_KIND_CONSUMER, Span.SPAN_KIND_CLIENT}
            wait_until(
                lambda: kinds <= {s["kind"] for s in collector.in_trace(TRACE_ID)}, timeout=30
            )
            # No `traceparent`: the trace the web starts is the request id it answers with.
            _, fresh, _ = processes.http("GET", f"{base}/healthz")
            wait_until(lambda: collector.in_trace(fresh["X-Request-ID"]), timeout=30)
        finally:
            web.stop()
            stop_celery_worker(worker)
    spans = collector.in_trace(TRACE_ID)
    [server] = [s for s in spans if s["kind"] == Span.SPAN_KIND_SERVER]
    assert (server["service"], server["parent_span_id"]) == ("picnic-web", "b7ad6b7169203331")
    # Our `traceparent` answer names the exported server span.
    assert headers["traceparent"] == f"00-{TRACE_ID}-{server['span_id']}-01"
    [task] = [s for s in spans if s["kind"] == Span.SPAN_KIND_CONSUMER]
    assert (task["service"], task["name"]) == (
        "picnic-worker",
        "run/messaging.tasks.delivery_deliver",
    )
    # The provider call; the other client spans are the database's and Redis's (PostgreSQL and
    # a Redis broker are instrumented too).
    [call] = [s for s in spans if s["kind"] == Span.SPAN_KIND_CLIENT and s["name"] == "POST"]
    assert (call["service"], call["name"]) == ("picnic-worker", "POST")
    # The provider was sent the client span as its parent.
    [sent] = provider.requests
    assert sent["traceparent"] == f"00-{TRACE_ID}-{call['span_id']}-01"
    assert {s["trace_id"] for s in spans} == {TRACE_ID}
    assert {trace_id for _, trace_id in _trace_ids(delivery)} == {TRACE_ID}
    records = [
        json.loads(line)
        for line in (tmp_path / "worker.log").read_text().splitlines()
        if line.startswith("{")
    ]
    about_it = [r for r in records if r.get("delivery_id") == str(delivery.pk)]
    assert about_it, records
    assert {r["trace_id"] for r in about_it} == {TRACE_ID}
    # The worker's lines name its task span.
    assert task["span_id"] in {r["span_id"] for r in about_it}
    [fresh_server] = [
        s for s in collector.in_trace(fresh["X-Request-ID"]) if s["kind"] == Span.SPAN_KIND_SERVER
    ]
    assert fresh_server["parent_span_id"] == ""


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
