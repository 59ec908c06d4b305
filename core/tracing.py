"""The trace context of the work in hand: one W3C Trace Context (`traceparent`) per piece of
work, followed from the API request through the on-commit Celery task and the provider call
into the history rows it writes.

The context lives in a contextvar (a request, a task and an async MCP call each see their own).
`traceparent` is parsed here rather than with opentelemetry-api's propagator: the format is
four fixed fields, the values also come from JSON (MCP `_meta`), where the propagator would
need the same type guards.
A value that is not a valid version-00 header is ignored and a new trace is started: a client
can never make us fail or log something that is not two hex ids.

When OpenTelemetry is on (picnic.otel, only with OTEL_EXPORTER_OTLP_ENDPOINT set), its span is
the trace context: the instrumentations start the web and task spans from the same header, and
we take our context from the current span (`from_opentelemetry()`), so the ids in log lines and
history rows are the ids of the exported spans. Off, nothing here touches OpenTelemetry.

Work identifiers (`action_id`, `delivery_id`, `operation_id`) sit beside it in a second
contextvar (`bind()`), so every log line written while handling an item names it.
"""

from __future__ import annotations

import contextvars
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace

HEADER = "traceparent"
# version 00: exactly four lower-case hex fields; longer or upper-case values are refused.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_TRACE_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class TraceContext:
    trace_id: str  # 32 hex
    span_id: str  # 16 hex: our span (or, when just parsed, the caller's)
    flags: str = "01"

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def child(self) -> TraceContext:
        """A new span in the same trace (what we send to the next hop)."""
        return TraceContext(self.trace_id, _new_span_id(), self.flags)


def _new_span_id() -> str:
    while (span := secrets.token_hex(8)) == _ZERO_SPAN:
        pass
    return span


def _new_trace_id() -> str:
    while (trace := secrets.token_hex(16)) == _ZERO_TRACE:
        pass
    return trace


def new_trace() -> TraceContext:
    return TraceContext(_new_trace_id(), _new_span_id())


def parse(value: Any) -> TraceContext | None:
    """A valid version-00 `traceparent`, or None for anything else (any type, any length)."""
    if not isinstance(value, str) or len(value) != 55:
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    trace_id, span_id, flags = match.groups()
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return TraceContext(trace_id, span_id, flags)


def is_trace_id(value: Any) -> bool:
    return isinstance(value, str) and value != _ZERO_TRACE and bool(_TRACE_ID.fullmatch(value))


_current: contextvars.ContextVar[TraceContext | None] = contextvars.ContextVar(
    "picnic_trace", default=None
)
_work: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "picnic_work", default=MappingProxyType({})
)


# Set once at start-up by picnic.otel when spans are exported.
_tracer: otel_trace.Tracer | None = None
# The ASGI instrumentation (a server span per HTTP request), given by picnic.otel with the tracer.
_asgi: Callable[[Any], Any] | None = None


def use_opentelemetry(
    tracer: otel_trace.Tracer | None, asgi: Callable[[Any], Any] | None = None
) -> None:
    global _tracer, _asgi
    _tracer, _asgi = tracer, asgi


def traced_asgi(app: Any) -> Any:
    """`app` with a server span per HTTP request, from its `traceparent`, when spans are
    exported (an ASGI server that is not Django's: the MCP process); `app` itself when off."""
    return _asgi(app) if _asgi is not None else app


def opentelemetry_on() -> bool:
    return _tracer is not None


def from_opentelemetry() -> TraceContext | None:
    """The current OpenTelemetry span as our context (None when off or outside any span)."""
    if _tracer is None:
        return None
    span_context = otel_trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return TraceContext(
        format(span_context.trace_id, "032x"),
        format(span_context.span_id, "016x"),
        format(span_context.trace_flags, "02x"),
    )


def _otel_attach(context: TraceContext) -> object | None:
    """Make `context` the parent of the OpenTelemetry spans started in the block (a trace we
    adopt or continue by hand), so they join it too; None when off."""
    if _tracer is None:
        return None
    parent = otel_trace.NonRecordingSpan(
        otel_trace.SpanContext(
            int(context.trace_id, 16),
            int(context.span_id, 16),
            is_remote=False,
            trace_flags=otel_trace.TraceFlags(int(context.flags, 16)),
        )
    )
    return otel_context.attach(otel_trace.set_span_in_context(parent))


def _otel_detach(token: object | None) -> None:
    if token is not None:
        otel_context.detach(token)


@contextmanager
def client_span(name: str, **attributes: Any) -> Iterator[None]:
    """An outgoing call as an OpenTelemetry client span (the project's HTTP client is
    http.client, which has no instrumentation), current for the block, so the `traceparent`
    we send names it. Nothing happens when OpenTelemetry is off."""
    if _tracer is None:
        yield
        return
    with _tracer.start_as_current_span(
        name, kind=otel_trace.SpanKind.CLIENT, attributes=attributes
    ):
        token = _current.set(from_opentelemetry())
        try:
            yield
        finally:
            _current.reset(token)


def current() -> TraceContext | None:
    return _current.get()


def current_trace_id() -> str:
    """The trace id to store on a history row or entity ("" outside any trace)."""
    context = _current.get()
    return context.trace_id if context else ""


def work_ids() -> Mapping[str, str]:
    return _work.get()


def activate(context: TraceContext | None) -> contextvars.Token:
    return _current.set(context)


def deactivate(token: contextvars.Token) -> None:
    _current.reset(token)


def continue_from(traceparent: Any) -> TraceContext:
    """Our span of the caller's trace, or a new trace when there is no valid caller."""
    parent = parse(traceparent)
    return parent.child() if parent else new_trace()


@contextmanager
def span(traceparent: Any = None) -> Iterator[TraceContext]:
    """Run the block in our own span of `traceparent`'s trace (or of a new trace)."""
    context = continue_from(traceparent)
    token = _current.set(context)
    otel_token = _otel_attach(context)
    try:
        yield context
    finally:
        _otel_detach(otel_token)
        _current.reset(token)


@contextmanager
def span_of(traceparent: Any = None) -> Iterator[TraceContext]:
    """The block's context: with OpenTelemetry on, its current span (started by an
    instrumentation from the same `traceparent`), so the ids we log and send are the exported
    span's; off, or outside any span, our own span of `traceparent` (`span()`)."""
    context = from_opentelemetry()
    if context is None:
        with span(traceparent) as context:
            yield context
        return
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


@contextmanager
def adopt(trace_id: str | None) -> Iterator[None]:
    """Handle an item in the trace that created it (a beat worker picking up a stored item):
    a new span of the stored trace id. Nothing changes if it is blank or already current."""
    context = _current.get()
    if not is_trace_id(trace_id) or (context and context.trace_id == trace_id):
        yield
        return
    flags = context.flags if context else "01"
    adopted = TraceContext(trace_id, _new_span_id(), flags)
    token = _current.set(adopted)
    otel_token = _otel_attach(adopted)
    try:
        yield
    finally:
        _otel_detach(otel_token)
        _current.reset(token)


def bind_ids(**ids: Any) -> contextvars.Token:
    """Add work identifiers until the token is reset (`bind()` is the block form)."""
    named = {k: str(v) for k, v in ids.items() if v is not None}
    return _work.set(MappingProxyType({**_work.get(), **named}))


@contextmanager
def bind(**ids: Any) -> Iterator[None]:
    """Name the item in hand on every log line of the block (`bind(delivery_id=…)`)."""
    token = bind_ids(**ids)
    try:
        yield
    finally:
        _work.reset(token)


def clear() -> None:
    """No trace and no work in hand (a worker between tasks)."""
    _current.set(None)
    _work.set(MappingProxyType({}))


def outgoing_headers() -> dict[str, str]:
    """`traceparent` of our span for a call we make (empty outside any trace)."""
    context = _current.get()
    if context is None:
        return {}
    # With OpenTelemetry on, the current span is the client span made for this call.
    return {HEADER: (context if _tracer is not None else context.child()).traceparent}
