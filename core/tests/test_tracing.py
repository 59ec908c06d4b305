"""W3C trace context: parsing hostile values, the request's span and response headers, and the
JSON log lines (the real console handler's output, parsed line by line)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import tracing
from core.logs import TraceFilter

ROOT = Path(__file__).resolve().parents[2]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"

HOSTILE = [
    f"00-{TRACE_ID}-00f067aa0ba902b7-01-extra",  # version 00 has exactly four fields
    PARENT + "0" * 10_000,  # too long
    "00-" + "g" * 32 + "-00f067aa0ba902b7-01",  # not hex
    PARENT.upper(),  # hex is lower case
    "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
    f"00-{TRACE_ID}-" + "0" * 16 + "-01",  # all-zero parent id
    f"ff-{TRACE_ID}-00f067aa0ba902b7-01",  # version ff is invalid
    f"00-{TRACE_ID[:-1]}\x00-00f067aa0ba902b7-01",  # NUL
    f"00-{TRACE_ID[:-1]}é-00f067aa0ba902b7-01",  # unicode, same length
    "00-４bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # a full-width digit
    "",
    " ",
    None,
    55,
    ["00", TRACE_ID],
    {"traceparent": PARENT},
    b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
]


def test_it_parses_a_valid_traceparent():
    assert tracing.parse(PARENT) == tracing.Ids(TRACE_ID, "00f067aa0ba902b7", "01")
    with tracing.span(PARENT) as ours:  # a span of the caller's trace
        assert ours.trace_id == TRACE_ID and ours.span_id != "00f067aa0ba902b7"
        assert tracing.current() == ours
        assert tracing.outgoing_headers() == {"traceparent": ours.traceparent}
    assert tracing.current() is None and tracing.outgoing_headers() == {}


@pytest.mark.parametrize("value", HOSTILE)
def test_it_ignores_invalid_values(value):
    assert tracing.parse(value) is None
    with tracing.span(value) as started:  # a new trace instead
        assert tracing.is_trace_id(started.trace_id) and started.trace_id != TRACE_ID


def test_adopt_continues_a_stored_trace_and_ignores_a_blank_one():
    with tracing.span() as request:
        with tracing.adopt(TRACE_ID):
            assert tracing.current_trace_id() == TRACE_ID
        assert tracing.current() == request
        with tracing.adopt(""):
            assert tracing.current() == request
    assert tracing.current() is None


@pytest.fixture
def log_lines():
    """What the real console handler (LOGGING's formatter and filter) writes, one JSON object
    per line."""
    handler = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        handler.setStream(previous)


def test_a_request_continues_the_callers_trace_and_says_so(client, log_lines):
    response = client.get("/healthz", HTTP_TRACEPARENT=PARENT)
    assert response.status_code == 200
    ours = tracing.parse(response["traceparent"])
    assert ours.trace_id == TRACE_ID and ours.span_id != "00f067aa0ba902b7"
    assert response["X-Request-ID"] == TRACE_ID
    [access] = [line for line in log_lines() if line["logger"] == "picnic.access"]
    assert access["trace_id"] == TRACE_ID and access["span_id"] == ours.span_id
    assert access["method"] == "GET" and access["path"] == "/healthz"
    assert access["status"] == 200 and access["user_id"] is None
    assert isinstance(access["duration_ms"], float)
    assert {"time", "level", "message"} <= access.keys()


@pytest.mark.parametrize("value", [v for v in HOSTILE if isinstance(v, str) and "\x00" not in v])
def test_a_request_with_an_invalid_traceparent_gets_a_new_trace(client, value):
    response = client.get("/healthz", HTTP_TRACEPARENT=value)
    assert response.status_code == 200
    ours = tracing.parse(response["traceparent"])
    assert ours is not None and ours.trace_id != TRACE_ID
    assert response["X-Request-ID"] == ours.trace_id


def test_a_nul_in_the_header_is_ignored_too(rf):
    # The test client refuses to send a NUL; the middleware sees one through WSGI all the same.
    from core.middleware import TraceMiddleware

    request = rf.get("/healthz", HTTP_TRACEPARENT=f"00-{TRACE_ID[:-1]}\x00-00f067aa0ba902b7-01")
    seen = []
    response = TraceMiddleware(lambda r: seen.append(tracing.current()) or _ok())(request)
    assert seen[0].trace_id != TRACE_ID
    assert response["X-Request-ID"] == seen[0].trace_id


def _ok():
    from django.http import HttpResponse

    return HttpResponse("ok")


def test_an_api_request_logs_the_user_and_never_the_token(
    api_client, user, application, make_token, log_lines
):
    token = make_token(user, application, scope="read:actions")
    response = api_client.get(
        "/api/v1/actions/6f1f1a8e-0000-4000-8000-000000000000?secret=shh",
        token,
        HTTP_TRACEPARENT=PARENT,
    )
    assert response.status_code == 404
    lines = log_lines()
    assert lines and all(line["trace_id"] == TRACE_ID for line in lines)
    [access] = [line for line in lines if line["logger"] == "picnic.access"]
    assert access["user_id"] == user.pk and access["status"] == 404
    assert access["path"] == "/api/v1/actions/6f1f1a8e-0000-4000-8000-000000000000"
    written = json.dumps(lines)
    assert token.token not in written
    assert "Bearer" not in written
    assert "shh" not in written  # Django's "Not Found" record carries the request: not logged


def test_the_filter_names_the_work_in_hand():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    with tracing.span(PARENT), tracing.bind(action_id="a1", delivery_id=None):
        TraceFilter().filter(record)
    assert record.trace_id == TRACE_ID and record.action_id == "a1"
    assert not hasattr(record, "delivery_id")


def _log_format(**overrides: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k not in overrides}
    environ.update(overrides, DJANGO_SETTINGS_MODULE="picnic.settings")
    code = (
        "import django, logging; django.setup(); from django.conf import settings; "
        "print(settings.LOG_FORMAT); logging.getLogger('probe').warning('hello')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip(), result.stderr.strip().splitlines()[-1]


def test_json_in_production_and_text_under_debug():
    fmt, line = _log_format(DJANGO_DEBUG="", LOG_FORMAT="")
    assert fmt == "json" and json.loads(line)["message"] == "hello"
    fmt, line = _log_format(DJANGO_DEBUG="true", LOG_FORMAT="")
    assert fmt == "text" and line.endswith("probe: hello [trace ]")
    fmt, line = _log_format(DJANGO_DEBUG="true", LOG_FORMAT="json")
    assert fmt == "json" and json.loads(line)["logger"] == "probe"
