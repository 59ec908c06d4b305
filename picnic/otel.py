"""Spans over OTLP/HTTP, only when OTEL_EXPORTER_OTLP_ENDPOINT is set: configured once per
process from PicnicConfig.ready() (web under gunicorn/uvicorn, Celery worker and beat,
run_local, run_prod). Unset, nothing is installed and nothing is exported.

What each piece is for (all pinned in requirements.txt):
- opentelemetry-sdk: the tracer provider and the batch span processor (export off the request
  path, in a thread the SDK restarts after a fork);
- opentelemetry-exporter-otlp-proto-http: sends the spans as protobuf over HTTP to
  `$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces` (the SDK reads the standard OTEL_* variables:
  OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS, …);
- opentelemetry-instrumentation-django: the server span of each request, from `traceparent`
  (with opentelemetry-instrumentation-asgi, which it needs for requests served by picnic.asgi);
- opentelemetry-instrumentation-celery: the publish and run spans of each task, carrying
  `traceparent` in the message headers (core.task_tracing steps aside for it);
- opentelemetry-instrumentation-psycopg: connection and query spans of psycopg 3;
- opentelemetry-instrumentation-redis: the Redis commands (events, locks, the broker).
- opentelemetry-instrumentation-asgi: the server span of each HTTP request of the MCP process
  (Starlette, not Django: core.tracing.traced_asgi); the MCP SDK adds a span per message
  (`tools/call <tool>`) under it.
The provider call (core.http, on httpx driven by core/outbound.py, which no instrumentation
sees) and the chain's and bundlers' JSON-RPC calls (evm.rpc, which imports nothing of ours) make their client spans with
core.tracing.client_span.
"""

from __future__ import annotations

from django.conf import settings
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from core import task_tracing, tracing
from evm import rpc

_provider: TracerProvider | None = None


def configure() -> TracerProvider | None:
    """Install the provider and the instrumentations once; None when tracing is off."""
    global _provider
    if not settings.OTEL_EXPORTER_OTLP_ENDPOINT or _provider is not None:
        return _provider
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: settings.OTEL_SERVICE_NAME}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    # Before the WSGI/ASGI handler loads MIDDLEWARE: the instrumentation puts its middleware
    # first, ahead of core.middleware.TraceMiddleware, which takes its span as the context.
    DjangoInstrumentor().instrument(tracer_provider=provider)
    # Our task receivers go after OpenTelemetry's (receivers run in the order connected), so
    # the task's span is current when ours reads it.
    task_tracing.disconnect()
    CeleryInstrumentor().instrument(tracer_provider=provider)
    task_tracing.connect()
    PsycopgInstrumentor().instrument(tracer_provider=provider, enable_commenter=False)
    RedisInstrumentor().instrument(tracer_provider=provider)
    tracing.use_opentelemetry(
        provider.get_tracer("picnic"),
        asgi=lambda app: OpenTelemetryMiddleware(app, tracer_provider=provider),
    )
    rpc.trace_calls(tracing.client_span)
    _provider = provider
    return provider
