"""The trace goes with the task: a publisher puts its `traceparent` (a child span) in the
Celery message headers, and the worker runs the task in a span of that trace. A message
without one (beat, an older publisher) starts a new trace. Eager tasks run in the caller's
context already, so their trace is left alone.

With OpenTelemetry on (picnic.otel), its Celery instrumentation carries the same header
instead (one mechanism: the publish span's `traceparent`), and the task's span, started from it
before our prerun receiver runs, is the task's context.

While a task runs, its log lines also name the task and the entity it was handed (an argument
named `*_id`, e.g. `delivery_id`)."""

from __future__ import annotations

import contextvars
import inspect

from celery.signals import before_task_publish, task_postrun, task_prerun

from core import tracing

_tokens: dict[str, list[contextvars.Token]] = {}


def _on_publish(headers=None, **_):
    if tracing.opentelemetry_on():
        return
    if headers is not None and tracing.HEADER not in headers:
        headers.update(tracing.outgoing_headers())


def _work_ids(task, args, kwargs) -> dict[str, str]:
    try:
        bound = inspect.signature(task.run).bind_partial(*(args or ()), **(kwargs or {}))
    except (TypeError, ValueError):  # arguments that do not fit: the task will say so itself
        return {}
    return {k: str(v) for k, v in bound.arguments.items() if k.endswith("_id") and v is not None}


def _on_prerun(task_id=None, task=None, args=None, kwargs=None, **_):
    request = getattr(task, "request", None)
    if request is None:
        return
    tokens = []
    if not request.is_eager:
        context = tracing.from_opentelemetry() or tracing.continue_from(request.get(tracing.HEADER))
        tokens.append(tracing.activate(context))
    tokens.append(tracing.bind_ids(task=task.name, **_work_ids(task, args, kwargs)))
    _tokens[task_id] = tokens


def _on_postrun(task_id=None, **_):
    try:
        for token in reversed(_tokens.pop(task_id, [])):
            token.var.reset(token)
    except ValueError:  # set in another context (a pool that switched threads): start clean
        tracing.clear()


def disconnect() -> None:
    """picnic.otel reconnects these after OpenTelemetry's own receivers (they run in order)."""
    before_task_publish.disconnect(dispatch_uid="picnic-trace-publish")
    task_prerun.disconnect(dispatch_uid="picnic-trace-prerun")
    task_postrun.disconnect(dispatch_uid="picnic-trace-postrun")


def connect() -> None:
    before_task_publish.connect(_on_publish, weak=False, dispatch_uid="picnic-trace-publish")
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="picnic-trace-prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="picnic-trace-postrun")
