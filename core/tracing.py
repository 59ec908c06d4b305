"""The trace context of the work in hand: one W3C Trace Context (`traceparent`) per piece of
work, followed from the API request through the on-commit Celery task and the provider call
into the history rows it writes.

The context lives in a contextvar (a request, a task and an async MCP call each see their own).
`traceparent` is parsed here rather than with opentelemetry-api's propagator: the format is
four fixed fields, the values also come from JSON (MCP `_meta`), where the propagator would
need the same type guards, and we keep no OpenTelemetry context or spans of our own.
A value that is not a valid version-00 header is ignored and a new trace is started: a client
can never make us fail or log something that is not two hex ids.

Work identifiers (`action_id`, `delivery_id`, `operation_id`) sit beside it in a second
contextvar (`bind()`), so every log line written while handling an item names it.
"""

from __future__ import annotations

import contextvars
import re
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

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
    token = _current.set(TraceContext(trace_id, _new_span_id(), flags))
    try:
        yield
    finally:
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
    """`traceparent` of a child span for a call we make (empty outside any trace)."""
    context = _current.get()
    return {HEADER: context.child().traceparent} if context else {}
