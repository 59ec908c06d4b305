"""What a request pays for its trace: `core.middleware.TraceMiddleware` (an OpenTelemetry
server span from the caller's `traceparent`, dropped at its end with nothing exported; the
response headers; one JSON access line written to a file) against the same middleware stack
without it, both measured in this run, interleaved, on `/healthz` (no I/O, so the difference
is the trace's alone). No database. A third column, "otel", is the same request with the spans
exported in the background over OTLP/HTTP to a local receiver started here (the export that
OTEL_EXPORTER_OTLP_ENDPOINT turns on, without the Django instrumentation it adds).

    .venv/bin/python bench/trace_overhead.py [--requests 1000] [--rounds 9]

Prints the median time per request of each and the ratios, last.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")
os.environ.setdefault("LOG_FORMAT", "json")

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.test import Client, override_settings
    from django.test.utils import setup_test_environment

    setup_test_environment()
    # The real console handler and formatter, writing to a real file instead of the terminal.
    handler = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    sink = open(os.devnull, "w")  # noqa: SIM115 - open for the whole run
    handler.setStream(sink)

    ours = Client()
    baseline = Client()
    stack = [
        m
        for m in settings.MIDDLEWARE
        if m != "core.middleware.TraceMiddleware" and not m.startswith("opentelemetry.")
    ]
    with override_settings(MIDDLEWARE=stack):
        baseline.get("/healthz")  # loads the middleware chain now, without the trace
    ours.get("/healthz")

    def per_request(client: Client) -> float:
        started = time.perf_counter()
        for _ in range(args.requests):
            response = client.get("/healthz", HTTP_TRACEPARENT=PARENT)
            assert response.status_code == 200
        return (time.perf_counter() - started) / args.requests * 1000

    assert "X-Request-ID" in ours.get("/healthz").headers
    assert "X-Request-ID" not in baseline.get("/healthz").headers

    # Export, for the third column only: a processor switched on for its turns.
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from dev.testing import OtlpReceiver

    class Switched(SpanProcessor):
        def __init__(self, inner: SpanProcessor):
            self.inner, self.on = inner, False

        def on_start(self, span, parent_context=None):
            if self.on:
                self.inner.on_start(span, parent_context)

        def on_end(self, span):
            if self.on:
                self.inner.on_end(span)

        def force_flush(self, timeout_millis=30000):
            return self.inner.force_flush(timeout_millis)

    collector = OtlpReceiver().start()
    exporter = OTLPSpanExporter(endpoint=f"{collector.endpoint}/v1/traces")
    export = Switched(BatchSpanProcessor(exporter))
    provider = trace.get_tracer_provider()
    provider.add_span_processor(export)  # type: ignore[attr-defined]
    traced = ours

    times: dict[str, list[float]] = {"baseline": [], "ours": [], "otel": []}
    for _ in range(args.rounds):
        times["baseline"].append(per_request(baseline))
        times["ours"].append(per_request(ours))
        export.on = True
        times["otel"].append(per_request(traced))
        export.on = False
    export.force_flush()
    assert len(collector.spans) >= args.rounds * args.requests, len(collector.spans)
    collector.stop()
    base = statistics.median(times["baseline"])
    mine = statistics.median(times["ours"])
    spans = statistics.median(times["otel"])
    print(f"{args.rounds} interleaved rounds of {args.requests} GET /healthz, median per request")
    print(f"baseline (no trace middleware): {base:.3f} ms")
    print(
        f"ours (server span + trace headers + JSON access line): {mine:.3f} ms"
        f"  (+{(mine - base) * 1000:.0f} µs)"
    )
    print(
        f"otel (ours, the spans exported over OTLP/HTTP): {spans:.3f} ms"
        f"  (+{(spans - mine) * 1000:.0f} µs over ours)"
    )
    print(f"ratio ours/baseline: {mine / base:.2f}")
    print(f"ratio otel/ours: {spans / mine:.2f}")


if __name__ == "__main__":
    main()
