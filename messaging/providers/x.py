"""X API v2 Direct Messages adapter.

`POST /2/dm_conversations/with/{participant_id}/messages` with a user-context bearer token and
`{"text": …}`; a 201 answers `{"data": {"dm_conversation_id": …, "dm_event_id": …}}`; errors
come as RFC 7807 problems (`title`, `detail`, `type`, `status`) or `{"errors": [{"message"}]}`.

The call is split in two on purpose: `connect()` opens the TCP (and TLS) connection while the
delivery is still `claimed`, so a refusal there provably sent nothing and may be retried;
`send()` runs after the caller has committed `sending`, and everything that goes wrong from
then on is an unknown outcome.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit


class NotSent(Exception):
    """The request never left (e.g. connection refused): safe to retry."""


class Refused(Exception):
    """The provider answered and definitively refused (4xx with a reason)."""

    def __init__(self, reason: str, *, status: int, payload: Any):
        self.status = status
        self.payload = payload
        super().__init__(reason)


class OutcomeUnknown(Exception):
    """The request may have been delivered: timeout, dropped connection, 5xx, garbage."""

    def __init__(self, reason: str, *, payload: Any = None):
        self.payload = payload
        super().__init__(reason)


@dataclass(frozen=True)
class Sent:
    message_id: str
    conversation_id: str
    payload: dict[str, Any]


def _problem_reason(status: int, body: bytes) -> tuple[str, Any]:
    try:
        payload = json.loads(body)
    except ValueError:
        return f"HTTP {status}: {body[:200].decode(errors='replace')}", None
    if isinstance(payload, dict):
        if payload.get("detail") or payload.get("title"):
            return (
                f"{payload.get('title') or status}: {payload.get('detail') or ''}".strip(),
                payload,
            )
        errors = payload.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            return str(errors[0].get("message") or errors[0]), payload
    return f"HTTP {status}", payload


class XDirectMessages:
    def __init__(self, base_url: str, *, timeout: float):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"X API base URL must be http(s)://host[:port], got {base_url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.timeout = timeout

    def connect(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.connect()
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake: nothing was sent
            conn.close()
            raise NotSent(f"could not connect to {self.host}:{self.port}: {exc}") from exc
        return conn

    def send(
        self, conn: http.client.HTTPConnection, *, token: str, participant_id: str, text: str
    ) -> Sent:
        path = f"/2/dm_conversations/with/{quote(participant_id, safe='')}/messages"
        body = json.dumps({"text": text}).encode()
        try:
            conn.request(
                "POST",
                path,
                body=body,
                headers={
                    "Authorization": f"Bearer {token}",
                    "Content-Type": "application/json",
                    "User-Agent": "picnic-backoffice/1",
                },
            )
            response = conn.getresponse()
            raw = response.read()
        except TimeoutError as exc:
            raise OutcomeUnknown(f"no answer within {self.timeout:g}s after sending") from exc
        except (http.client.HTTPException, OSError) as exc:
            raise OutcomeUnknown(
                f"connection lost after sending: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            conn.close()
        status = response.status
        if 200 <= status < 300:
            try:
                data = json.loads(raw)["data"]
                return Sent(
                    str(data["dm_event_id"]), str(data["dm_conversation_id"]), json.loads(raw)
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise OutcomeUnknown(
                    f"HTTP {status} with an unreadable body: {raw[:200].decode(errors='replace')}"
                ) from exc
        reason, payload = _problem_reason(status, raw)
        if 400 <= status < 500:
            raise Refused(reason, status=status, payload=payload)
        raise OutcomeUnknown(f"HTTP {status} after sending: {reason}", payload=payload)
