"""Spans only when OTEL_EXPORTER_OTLP_ENDPOINT is set (picnic.otel): unset, start-up installs
no provider, instrumentation or exporter. The spans themselves, across a real web, worker and
collector: messaging/tests/test_tracing.py."""

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
    "from celery.signals import task_prerun; from core import tracing; "
    "print(json.dumps({"
    "'first_middleware': settings.MIDDLEWARE[0], 'middleware': settings.MIDDLEWARE, "
    "'provider': type(trace.get_tracer_provider()).__name__, "
    "'on': tracing.opentelemetry_on(), "
    "'sdk_loaded': 'opentelemetry.sdk.trace' in sys.modules, "
    "'prerun': [getattr(r[-1], '__qualname__', '') for r in task_prerun.receivers]}))"
)


def _start(**env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(DJANGO_SETTINGS_MODULE="picnic.settings", **env)
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=environ, capture_output=True, text=True
    )


def test_without_an_endpoint_nothing_is_installed():
    result = _start()
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.splitlines()[-1])
    # Our own list, unchanged: the client's address first (everything below reads it), then
    # our trace; no instrumentation middleware anywhere.
    assert probe["middleware"][:2] == [
        "core.proxy.ClientAddressMiddleware",
        "core.middleware.TraceMiddleware",
    ]
    assert not any(m.startswith("opentelemetry.") for m in probe["middleware"])
    assert probe["provider"] == "ProxyTracerProvider"
    assert probe["on"] is False
    assert probe["sdk_loaded"] is False


def test_with_an_endpoint_the_instrumentation_runs_before_our_trace_code():
    result = _start(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318")
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.splitlines()[-1])
    assert probe["first_middleware"].startswith("opentelemetry.instrumentation.django.")
    assert probe["provider"] == "TracerProvider"
    assert probe["on"] is True
    # The task's span is current when our receiver reads it.
    prerun = probe["prerun"]
    ours = prerun.index("_on_prerun")  # core.task_tracing
    assert any(name.endswith("_trace_prerun") for name in prerun[:ours]), prerun


def test_a_bad_endpoint_stops_start_up():
    result = _start(OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318")
    assert result.returncode != 0 and "OTEL_EXPORTER_OTLP_ENDPOINT" in result.stderr
