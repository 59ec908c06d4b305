"""A small JSON-over-HTTP client for provider adapters (on httpx), with the at-most-once split.

`connect()` opens the connection before anything is sent: failing there (refused, unreachable,
TLS) raises NotSent, which callers may retry. `request()` sends on that connection and reads
the answer: a timeout or a dropped connection after that raises OutcomeUnknown, and nothing is
ever sent again by itself (the request goes on that one connection: core/outbound.py). An HTTP
answer is returned as is, so each adapter maps its provider's status codes and bodies.

`timeout` bounds each connect and the whole of `request()` (send to last byte: a provider that
answers a byte a second is cut off, core/outbound.py), and an answer is at most `max_bytes`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from core import metrics, outbound, tracing


class NotSent(Exception):
    """The request never left (e.g. connection refused): safe to retry."""


class Refused(Exception):
    """The provider answered and definitively refused (4xx with a reason)."""

    def __init__(self, reason: str, *, status: int, payload: Any):
        self.status = status
        self.payload = payload
        super().__init__(reason)


class OutcomeUnknown(Exception):
    """The request may have been processed: timeout, dropped connection, 5xx, garbage."""

    def __init__(self, reason: str, *, payload: Any = None):
        self.payload = payload
        super().__init__(reason)


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    raw: bytes

    def json(self) -> Any:
        return json.loads(self.raw)


def problem_reason(answer: HttpAnswer) -> tuple[str, Any]:
    """A readable reason from an error body: RFC 7807, `{"error": {...}}`, `{"message": …}`
    or `{"errors": [...]}`."""
    try:
        payload = answer.json()
    except ValueError:
        return f"HTTP {answer.status}: {answer.raw[:200].decode(errors='replace')}", None
    if isinstance(payload, dict):
        if payload.get("detail") or payload.get("title"):
            reason = f"{payload.get('title') or answer.status}: {payload.get('detail') or ''}"
            return reason.strip(), payload
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"]), payload
        if isinstance(payload.get("message"), str) and payload["message"]:
            return payload["message"], payload
        errors = payload.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            return str(errors[0].get("message") or errors[0]), payload
    return f"HTTP {answer.status}", payload


# No provider answers anything near this; a bigger answer is a fault, not data.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024


class JsonHttpClient:
    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        provider: str = "other",
        max_bytes: int = MAX_RESPONSE_BYTES,
    ):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL must be http(s)://host[:port], got {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.provider = provider  # the `provider` label of its metrics
        self.max_bytes = max_bytes

    def connect(self) -> outbound.Connection:
        try:
            return outbound.open_connection(
                address=self.host,  # a configured URL: each of its addresses in turn
                port=self.port,
                host=self.host,
                secure=self.scheme == "https",
                timeout=self.timeout,
            )
        except OSError as exc:
            metrics.count_provider_error(self.provider, "not_sent")
            raise NotSent(f"could not connect to {self.host}:{self.port}: {exc}") from exc

    def request(
        self,
        conn: outbound.Connection,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> HttpAnswer:
        # bytes go as they are (e.g. a form-encoded OAuth token request), anything else as JSON
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        all_headers = {"Content-Type": "application/json", "User-Agent": "picnic-backoffice/1"}
        deadline = outbound.deadline_in(self.timeout)
        try:
            with (
                outbound.watchdog(conn.sock, deadline) as dog,
                # no query string on the span: it may carry what a provider asks for
                tracing.client_span(
                    method,
                    **{
                        "http.request.method": method,
                        "server.address": self.host,
                        "server.port": self.port,
                        "url.path": self.prefix + path.partition("?")[0],
                    },
                ),
                metrics.provider_timer(self.provider),
            ):
                # the provider may log our trace too (with OpenTelemetry on: the client span)
                all_headers.update(tracing.outgoing_headers())
                all_headers.update(headers or {})
                answer = outbound.exchange(
                    conn,
                    method,
                    self.prefix + path,
                    headers=all_headers,
                    body=data,
                    deadline=deadline,
                    max_bytes=self.max_bytes,
                    dog=dog,
                )
        except outbound.TooLarge as exc:
            metrics.count_provider_error(self.provider, "invalid_response")
            raise OutcomeUnknown(f"answer too large: {exc}") from exc
        except outbound.DeadlineExceeded as exc:
            metrics.count_provider_error(self.provider, "timeout")
            raise OutcomeUnknown(f"no answer within {self.timeout:g}s after sending") from exc
        except outbound.FetchFailed as exc:
            cause = exc.__cause__ or exc
            metrics.count_provider_error(self.provider, "connection_lost")
            raise OutcomeUnknown(
                f"connection lost after sending: {type(cause).__name__}: {cause}"
            ) from exc
        finally:
            conn.close()
        if answer.status >= 400:
            metrics.count_provider_error(
                self.provider, "http_5xx" if answer.status >= 500 else "http_4xx"
            )
        return HttpAnswer(answer.status, answer.body)

    def call(self, method: str, path: str, **kwargs: Any) -> HttpAnswer:
        """connect + request, for calls where the split does not matter to the caller."""
        return self.request(self.connect(), method, path, **kwargs)
