"""OpenTelemetry, the one tracing API: configured once per process from PicnicConfig.ready()
(web under gunicorn/uvicorn, Celery worker and beat, the MCP process, run_local, run_prod).

Every process installs the SDK's tracer provider, so request ids, `traceparent` and the ids in
log lines and history rows come from its spans whatever the set-up (core.tracing). Spans leave
the process only with OTEL_EXPORTER_OTLP_ENDPOINT set: unset, no span processor, exporter or
Django/database/Redis instrumentation is installed (core.middleware.TraceMiddleware starts
each request's server span itself), and a finished span is simply dropped.

What each piece is for (all pinned in requirements.txt):
- opentelemetry-sdk: the tracer provider (ids, sampling: OTEL_TRACES_SAMPLER) and, when
  exporting, the batch span processor (export off the request path, in a thread the SDK
  restarts after a fork);
- opentelemetry-instrumentation-asgi: the server span of each HTTP request of the MCP process
  (Starlette, not Django: mcp_adapter/http.py); the MCP SDK adds a span per message
  (`tools/call <tool>`, from `_meta.traceparent` when the message has one) under it;
- opentelemetry-instrumentation-celery: the publish and run spans of each task, carrying
  `traceparent` in the message headers, so a task continues the trace that enqueued it;
- with an endpoint only: opentelemetry-instrumentation-django (the server span of each request
  from `traceparent`, with the HTTP attributes; it needs opentelemetry-instrumentation-asgi
  under picnic.asgi), opentelemetry-exporter-otlp-proto-http (protobuf over HTTP to
  `$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces`; the SDK reads the standard OTEL_* variables:
  OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS, …),
  opentelemetry-instrumentation-psycopg (connection and query spans of psycopg 3) and
  opentelemetry-instrumentation-redis (events, locks, the broker).
The provider calls (core.http on httpx, whose transport we drive ourselves) and the chain's and
bundlers' JSON-RPC calls (evm.rpc, which imports nothing of ours) make their client spans with
core.tracing.client_span.
"""

from __future__ import annotations

from django.conf import settings
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from core import tracing
from evm import rpc

_provider: TracerProvider | None = None


def configure() -> TracerProvider:
    """Install the provider and the instrumentations once."""
    global _provider
    if _provider is not None:
        return _provider
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: settings.OTEL_SERVICE_NAME}))
    if settings.OTEL_EXPORTER_OTLP_ENDPOINT:
        _export(provider)
    trace.set_tracer_provider(provider)
    CeleryInstrumentor().instrument(tracer_provider=provider)
    rpc.trace_calls(tracing.client_span)
    _provider = provider
    return provider


def _export(provider: TracerProvider) -> None:
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # The server span with the attributes a collector expects; its middleware goes first
    # (before the WSGI/ASGI handler loads MIDDLEWARE), and TraceMiddleware takes its span. Not
    # installed without export: it would double a bare request's cost for attributes nobody
    # reads (bench/trace_overhead.py), and TraceMiddleware starts the span itself.
    DjangoInstrumentor().instrument(tracer_provider=provider)
    PsycopgInstrumentor().instrument(tracer_provider=provider, enable_commenter=False)
    RedisInstrumentor().instrument(tracer_provider=provider)
