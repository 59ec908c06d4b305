"""OpenTelemetry in every process (picnic.otel): the SDK's provider and the Celery
instrumentation always (the ids of every request and task come from their spans), the
exporter and the Django, database and Redis instrumentations only when
OTEL_EXPORTER_OTLP_ENDPOINT is set. The spans
themselves, across a real web, worker and collector: messaging/tests/test_tracing.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = (
    "import json, sys, django; django.setup(); "
    "from django.conf import settings; from opentelemetry import trace; "
    "from celery.signals import task_prerun; "
    "from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor; "
    "provider = trace.get_tracer_provider(); "
    "print(json.dumps({"
    "'middleware': settings.MIDDLEWARE, "
    "'provider': type(provider).__name__, "
    "'processors': len(provider._active_span_processor._span_processors), "
    "'psycopg': PsycopgInstrumentor().is_instrumented_by_opentelemetry, "
    "'prerun': [getattr(r[-1], '__qualname__', '') for r in task_prerun.receivers]}))"
)


def _start(**env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(DJANGO_SETTINGS_MODULE="picnic.settings", **env)
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=environ, capture_output=True, text=True
    )


def _probe(**env: str) -> dict:
    result = _start(**env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_without_an_endpoint_the_ids_come_from_opentelemetry_and_nothing_is_exported():
    probe = _probe()
    assert probe["provider"] == "TracerProvider"
    # Our own list, unchanged: the client's address first (everything below reads it), then
    # our trace (the server span); no instrumentation middleware anywhere.
    assert probe["middleware"][:2] == [
        "core.proxy.ClientAddressMiddleware",
        "core.middleware.TraceMiddleware",
    ]
    assert not any(m.startswith("opentelemetry.") for m in probe["middleware"])
    assert any(name.endswith("_trace_prerun") for name in probe["prerun"]), probe["prerun"]
    assert probe["processors"] == 0
    assert probe["psycopg"] is False


def test_with_an_endpoint_spans_are_exported():
    probe = _probe(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318")
    assert probe["provider"] == "TracerProvider"
    assert probe["middleware"][0].startswith("opentelemetry.instrumentation.django.")
    assert probe["processors"] == 1
    assert probe["psycopg"] is True


def test_a_bad_endpoint_stops_start_up():
    result = _start(OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318")
    assert result.returncode != 0 and "OTEL_EXPORTER_OTLP_ENDPOINT" in result.stderr
