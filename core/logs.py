"""Log records that carry the trace: JSON lines in production (`LOG_FORMAT=json`, python-json-
logger), one readable line under `make run` (`text`).

`TraceFilter` sits on the handler, so every record that reaches it — ours, Django's, Celery's —
gets `trace_id` and `span_id` of the current OpenTelemetry span (or of the request it belongs
to, core.middleware) and the work identifiers bound with `core.tracing.bind()`. While a Celery
task runs, its lines also name the task and the entity it was handed (an argument named
`*_id`, e.g. `delivery_id`): `connect_tasks()`.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
from typing import Any

from celery.signals import task_postrun, task_prerun
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from core import tracing

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s [trace %(trace_id)s]"


# The ids of the request being served, for the lines written after its span ended.
_request: contextvars.ContextVar[tracing.Ids | None] = contextvars.ContextVar(
    "picnic_request_ids", default=None
)


def hold_request_ids(ids: tracing.Ids | None) -> None:
    _request.set(ids)


class TraceFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        ids = tracing.current() or _request.get()
        record.trace_id = ids.trace_id if ids else ""
        record.span_id = ids.span_id if ids else ""
        for name, value in tracing.work_ids().items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


def json_formatter(**_: Any) -> logging.Formatter:
    # time (ISO 8601, UTC), level, logger, message; extras (trace, work ids, access fields)
    # follow as their own keys. Django's records carry the request object (`extra=
    # {"request": …}`), whose text has the query string: never written.
    return JsonFormatter(
        "{levelname}{name}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        reserved_attrs=[*RESERVED_ATTRS, "request"],
    )


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    formatter = (
        {"()": "core.logs.json_formatter"} if log_format == "json" else {"format": TEXT_FORMAT}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"trace": {"()": "core.logs.TraceFilter"}},
        "formatters": {"default": formatter},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["trace"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
    }


_task_tokens: dict[str, contextvars.Token] = {}


def _task_ids(task, args, kwargs) -> dict[str, str]:
    try:
        bound = inspect.signature(task.run).bind_partial(*(args or ()), **(kwargs or {}))
    except (TypeError, ValueError):  # arguments that do not fit: the task will say so itself
        return {}
    return {k: str(v) for k, v in bound.arguments.items() if k.endswith("_id") and v is not None}


def _on_prerun(task_id=None, task=None, args=None, kwargs=None, **_):
    if task is not None and task_id is not None:
        _task_tokens[task_id] = tracing.bind_ids(task=task.name, **_task_ids(task, args, kwargs))


def _on_postrun(task_id=None, **_):
    token = _task_tokens.pop(task_id, None)
    try:
        if token is not None:
            token.var.reset(token)
    except ValueError:  # set in another context (a pool that switched threads): start clean
        tracing.clear()


def connect_tasks() -> None:
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="picnic-task-ids-prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="picnic-task-ids-postrun")
