"""Tool backend adapter: the OpenAI Responses API in background mode.

`POST /v1/responses` with `"background": true` answers at once with a response object whose
`status` is `queued`/`in_progress` (the acknowledgement: accepted, not finished);
`GET /v1/responses/{id}` later reports `completed` (with `output` and `usage`), `failed` (with
`error.code`), `cancelled` or `incomplete`. The create call carries `Idempotency-Key: <operation
id>`, so when its acknowledgement is lost, reconciliation asks again with the same key and the
backend answers with the response it already has (or creates it if the first request never
arrived). Usage: `input_tokens`, `input_tokens_details.cached_tokens`, `output_tokens`,
`output_tokens_details.reasoning_tokens`. `max_output_tokens` caps the answer (reasoning
included); an answer cut there comes back `incomplete` with
`incomplete_details.reason: "max_output_tokens"`, its usage billed all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.http import JsonHttpClient, NotSent, OutcomeUnknown, Refused, problem_reason

__all__ = ["BackendResponse", "NotSent", "OpenAIResponses", "OutcomeUnknown", "Refused"]

ACTIVE = ("queued", "in_progress")
FINAL = ("completed", "failed", "cancelled", "incomplete")


@dataclass(frozen=True)
class BackendResponse:
    id: str
    status: str
    raw: dict[str, Any]

    @property
    def output_text(self) -> str:
        parts = []
        for item in self.raw.get("output") or []:
            for content in item.get("content") or []:
                if content.get("type") == "output_text":
                    parts.append(content.get("text", ""))
        return "".join(parts)

    @property
    def usage(self) -> dict[str, int]:
        usage = self.raw.get("usage") or {}
        return {
            "input": int(usage.get("input_tokens") or 0),
            "cached": int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0),
            "output": int(usage.get("output_tokens") or 0),
            "reasoning": int(
                (usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
            ),
        }

    @property
    def error_code(self) -> str:
        if self.status == "incomplete":
            return str((self.raw.get("incomplete_details") or {}).get("reason") or self.status)
        error = self.raw.get("error") or {}
        return str(error.get("code") or self.status)


def _parse(answer) -> BackendResponse:
    if 200 <= answer.status < 300:
        try:
            raw = answer.json()
            response = BackendResponse(str(raw["id"]), str(raw["status"]), raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise OutcomeUnknown(f"HTTP {answer.status} with an unreadable body") from exc
        if response.status not in ACTIVE + FINAL:
            raise OutcomeUnknown(f"unexpected response status {response.status!r}", payload=raw)
        return response
    reason, payload = problem_reason(answer)
    if 400 <= answer.status < 500 and answer.status not in (408, 409, 429):
        raise Refused(reason, status=answer.status, payload=payload)
    raise OutcomeUnknown(f"HTTP {answer.status}: {reason}", payload=payload)


class OpenAIResponses:
    def __init__(self, base_url: str, *, api_key: str, timeout: float):
        self.http = JsonHttpClient(base_url, timeout=timeout, provider="responses_api")
        self.api_key = api_key

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", **(extra or {})}

    def create(
        self,
        *,
        idempotency_key: str,
        model: str,
        input: str,
        metadata: dict[str, str],
        max_output_tokens: int,
    ) -> BackendResponse:
        conn = self.http.connect()  # NotSent here: nothing left, safe to retry
        answer = self.http.request(
            conn,
            "POST",
            "/v1/responses",
            body={
                "model": model,
                "input": input,
                "background": True,
                "metadata": metadata,
                "max_output_tokens": max_output_tokens,
            },
            headers=self._headers({"Idempotency-Key": idempotency_key}),
        )
        return _parse(answer)

    def retrieve(self, response_id: str) -> BackendResponse:
        return _parse(
            self.http.call("GET", f"/v1/responses/{response_id}", headers=self._headers())
        )

    def cancel(self, response_id: str) -> BackendResponse:
        return _parse(
            self.http.call("POST", f"/v1/responses/{response_id}/cancel", headers=self._headers())
        )
