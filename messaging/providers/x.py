"""X API v2 Direct Messages adapter.

`POST /2/dm_conversations/with/{participant_id}/messages` with a user-context bearer token and
`{"text": …}`; a 201 answers `{"data": {"dm_conversation_id": …, "dm_event_id": …}}`; errors
come as RFC 7807 problems (`title`, `detail`, `type`, `status`) or `{"errors": [{"message"}]}`.

The call is split in two on purpose (core.http): `connect()` runs while the delivery is still
`claimed`, so a refusal there provably sent nothing and may be retried; `send()` runs after the
caller has committed `sending`, and everything that goes wrong from then on is unknown.
"""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from core.http import JsonHttpClient, NotSent, OutcomeUnknown, Refused, problem_reason

__all__ = ["NotSent", "OutcomeUnknown", "Refused", "Sent", "XDirectMessages"]


@dataclass(frozen=True)
class Sent:
    message_id: str
    conversation_id: str
    payload: dict[str, Any]


class XDirectMessages:
    def __init__(self, base_url: str, *, timeout: float):
        self.http = JsonHttpClient(base_url, timeout=timeout, provider="x")

    def connect(self) -> http.client.HTTPConnection:
        return self.http.connect()

    def send(
        self, conn: http.client.HTTPConnection, *, token: str, participant_id: str, text: str
    ) -> Sent:
        answer = self.http.request(
            conn,
            "POST",
            f"/2/dm_conversations/with/{quote(participant_id, safe='')}/messages",
            body={"text": text},
            headers={"Authorization": f"Bearer {token}"},
        )
        if 200 <= answer.status < 300:
            try:
                payload = answer.json()
                data = payload["data"]
                return Sent(str(data["dm_event_id"]), str(data["dm_conversation_id"]), payload)
            except (ValueError, KeyError, TypeError) as exc:
                raise OutcomeUnknown(
                    f"HTTP {answer.status} with an unreadable body: "
                    f"{answer.raw[:200].decode(errors='replace')}"
                ) from exc
        reason, payload = problem_reason(answer)
        if 400 <= answer.status < 500:
            raise Refused(reason, status=answer.status, payload=payload)
        raise OutcomeUnknown(f"HTTP {answer.status} after sending: {reason}", payload=payload)
