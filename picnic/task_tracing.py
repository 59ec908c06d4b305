"""The trace goes with the task: a publisher puts its `traceparent` (a child span) in the
Celery message headers, and the worker runs the task in a span of that trace. A message
without one (beat, an older publisher) starts a new trace. Eager tasks run in the caller's
context already, so they are left alone."""

from __future__ import annotations

import contextvars

from celery.signals import before_task_publish, task_postrun, task_prerun

from picnic import tracing

_tokens: dict[str, contextvars.Token] = {}


def _on_publish(headers=None, **_):
    if headers is not None and tracing.HEADER not in headers:
        headers.update(tracing.outgoing_headers())


def _on_prerun(task_id=None, task=None, **_):
    request = getattr(task, "request", None)
    if request is None or request.is_eager:
        return
    _tokens[task_id] = tracing.activate(tracing.continue_from(request.get(tracing.HEADER)))


def _on_postrun(task_id=None, **_):
    token = _tokens.pop(task_id, None)
    if token is None:
        return
    try:
        tracing.deactivate(token)
    except ValueError:  # set in another context (a pool that switched threads): just clear it
        tracing.activate(None)


def connect() -> None:
    before_task_publish.connect(_on_publish, weak=False, dispatch_uid="picnic-trace-publish")
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="picnic-trace-prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="picnic-trace-postrun")
