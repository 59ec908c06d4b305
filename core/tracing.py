"""The trace of the work in hand, through the OpenTelemetry API: one W3C Trace Context
(`traceparent`) per piece of work, followed from the API request through the on-commit Celery
task and the provider call into the history rows it writes.

OpenTelemetry is the only tracing API. Every process installs the SDK's tracer provider
(picnic.otel; spans are exported only with OTEL_EXPORTER_OTLP_ENDPOINT set), so the ids come
from its spans: the Django and ASGI instrumentations start a request's server span from its
`traceparent`, the Celery instrumentation carries it to the task and starts the task's span,
the MCP SDK starts a span per message from `_meta.traceparent`. This module is the small set
of calls the project makes on top: the ids of the current span (`current()`, for log lines,
history rows and response headers), a span of a given `traceparent` (`span()`), a stored
trace continued (`adopt()`), a client span for a call we make and the headers that name it.
A value that is not a valid `traceparent` is ignored and a new trace is started (the SDK's
propagator checks the format; only strings reach it): a client can never make us fail or log
something that is not two hex ids.

Work identifiers (`action_id`, `delivery_id`, `operation_id`) sit beside it in a contextvar of
their own (`bind()`), so every log line written while handling an item names it.
"""

from __future__ import annotations

import contextvars
import functools
import re
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

HEADER = "traceparent"
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_ZERO_TRACE = "0" * 32
_W3C = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class Ids:
    """An OpenTelemetry span context as the hex ids we log, store and send."""

    trace_id: str  # 32 hex
    span_id: str  # 16 hex
    flags: str = "01"

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    @classmethod
    def of(cls, span_context: otel_trace.SpanContext) -> Ids | None:
        if not span_context.is_valid:
            return None
        return cls(
            format(span_context.trace_id, "032x"),
            format(span_context.span_id, "016x"),
            format(span_context.trace_flags, "02x"),
        )


@functools.cache
def _tracer() -> otel_trace.Tracer:
    # Asked once: the SDK makes a new Tracer on every call. One asked for before the SDK's
    # provider is installed is the API's proxy, which follows the provider once it is.
    return otel_trace.get_tracer("picnic")


def _extract(traceparent: Any) -> otel_context.Context | None:
    """The caller's context from a `traceparent` value, or None for anything that is not a
    valid version-00 header (any type, any length; upper case and padding refused too)."""
    if not isinstance(traceparent, str) or len(traceparent) != 55 or traceparent[:3] != "00-":
        return None
    context = _W3C.extract({HEADER: traceparent})
    if not otel_trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def parse(value: Any) -> Ids | None:
    """A valid version-00 `traceparent`'s ids, or None."""
    context = _extract(value)
    return Ids.of(otel_trace.get_current_span(context).get_span_context()) if context else None


def is_trace_id(value: Any) -> bool:
    return isinstance(value, str) and value != _ZERO_TRACE and bool(_TRACE_ID.fullmatch(value))


def current() -> Ids | None:
    """The ids of the current span (None outside any)."""
    return Ids.of(otel_trace.get_current_span().get_span_context())


def current_trace_id() -> str:
    """The trace id to store on a history row or entity ("" outside any trace)."""
    ids = current()
    return ids.trace_id if ids else ""


@contextmanager
def span(traceparent: Any = None, name: str = "picnic.work", server: bool = False) -> Iterator[Ids]:
    """Run the block in a new span of `traceparent`'s trace, or of a new trace when there is
    no valid one (never of the span current before: a new piece of work); `server`: the span
    of a request we serve."""
    parent = _extract(traceparent) or otel_context.Context()
    kind = otel_trace.SpanKind.SERVER if server else otel_trace.SpanKind.INTERNAL
    with _tracer().start_as_current_span(name, context=parent, kind=kind) as started:
        yield Ids.of(started.get_span_context())  # type: ignore[misc]


@contextmanager
def span_of(traceparent: Any = None) -> Iterator[Ids]:
    """The block's context for a call that says which trace it continues (MCP: `_meta` or the
    HTTP header): the current span when it is of that trace (the MCP SDK's message span, started
    from the same `_meta`), else a span of `traceparent` (`span()`); with no valid value, the
    current span, or a new trace outside any."""
    wanted, ids = parse(traceparent), current()
    if ids is not None and (wanted is None or wanted.trace_id == ids.trace_id):
        yield ids
        return
    with span(traceparent) as ids:
        yield ids


@contextmanager
def adopt(trace_id: str | None) -> Iterator[None]:
    """Handle an item in the trace that created it (a beat worker picking up a stored item): a
    new span of the stored trace id. Nothing changes if it is blank or already current."""
    ids = current()
    if not is_trace_id(trace_id) or (ids and ids.trace_id == trace_id):
        yield
        return
    # The stored trace's own spans ended long ago: the new one hangs under the span in hand
    # (or, outside any, a fresh id), with the stored trace id.
    parent = otel_trace.SpanContext(
        int(trace_id, 16),  # type: ignore[arg-type]
        int(ids.span_id, 16) if ids else secrets.randbits(64) or 1,
        is_remote=True,
        trace_flags=otel_trace.TraceFlags(int(ids.flags, 16) if ids else 1),
    )
    context = otel_trace.set_span_in_context(otel_trace.NonRecordingSpan(parent))
    with _tracer().start_as_current_span("picnic.adopt", context=context):
        yield


@contextmanager
def client_span(name: str, **attributes: Any) -> Iterator[None]:
    """An outgoing call as a client span, current for the block, so the `traceparent` we send
    (`outgoing_headers()`) names it. Outside any trace (a beat batch) no span is started: a
    root span would hand the provider a trace id that no log line or history row of ours has."""
    if current() is None:
        yield
        return
    with _tracer().start_as_current_span(
        name, kind=otel_trace.SpanKind.CLIENT, attributes=attributes
    ):
        yield


def outgoing_headers() -> dict[str, str]:
    """`traceparent` of the current span for a call we make (empty outside any trace). Only
    it: a caller's `tracestate` is not passed on to the providers."""
    ids = current()
    return {HEADER: ids.traceparent} if ids else {}


_work: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "picnic_work", default=MappingProxyType({})
)


def work_ids() -> Mapping[str, str]:
    return _work.get()


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
    """No work in hand (a worker between tasks)."""
    _work.set(MappingProxyType({}))
