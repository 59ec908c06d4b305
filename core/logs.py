"""Log records that carry the trace: JSON lines in production (`LOG_FORMAT=json`, python-json-
logger), one readable line under `make run` (`text`).

`TraceFilter` sits on the handler, so every record that reaches it — ours, Django's, Celery's —
gets `trace_id`, `span_id` and the work identifiers bound with `core.tracing.bind()`.
"""

from __future__ import annotations

import logging
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from core import tracing

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s [trace %(trace_id)s]"


class TraceFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        context = tracing.current()
        record.trace_id = context.trace_id if context else ""
        record.span_id = context.span_id if context else ""
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
