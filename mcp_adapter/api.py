"""The adapter's only way in: our DRF API, called with the caller's bearer token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import requests
from django.conf import settings

from core import tracing
from core.api import error_text


@dataclass(frozen=True)
class ApiAnswer:
    status: int
    body: Any
    is_json: bool = True  # False: the body is our note that the API answered without JSON

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The API's error body (core.api) in one line for an isError result: its detail
        (the seeds' texts) and, when the input was refused, each field's messages."""
        body = self.body if isinstance(self.body, dict) else {}
        detail = str(body.get("detail") or f"the API answered {self.status}")
        errors = body.get("errors")
        return error_text(detail, errors if isinstance(errors, dict) else {})


def path_segment(value: Any) -> str:
    """`value` as exactly one path segment: `/`, `?`, `#` and `%` quoted, and dots too, so
    that `..` cannot climb out of the route (HTTP clients remove dot segments)."""
    return quote(str(value), safe="").replace(".", "%2E")


class PicnicApi:
    def __init__(self, base_url: str | None = None, timeout: float | None = None):
        self.base_url = (base_url or settings.MCP_API_URL).rstrip("/")
        self.timeout = timeout or settings.MCP_API_TIMEOUT_SECONDS
        self._session = requests.Session()

    def _call(self, method: str, path: str, token: str, body: Any) -> ApiAnswer:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        headers.update(tracing.outgoing_headers())  # the API continues the caller's trace
        if isinstance(body, dict) and isinstance(body.get("idempotency_key"), str):
            # A keyed write is safe to send again: a load balancer in front of the API
            # (HAProxy, docs/deploy.md) retries only requests that say so.
            headers["Idempotency-Key"] = body["idempotency_key"]
        try:
            response = self._session.request(
                method,
                self.base_url + path,
                json=body if method != "GET" else None,
                params=body if method == "GET" and body else None,
                headers=headers,
                timeout=self.timeout,
            )
        except requests.RequestException as exc:
            return ApiAnswer(503, {"detail": f"The Picnic API is unreachable: {exc}"})
        try:
            payload = response.json()
        except ValueError:
            detail = f"The Picnic API answered {response.status_code} without JSON"
            return ApiAnswer(response.status_code, {"detail": detail}, is_json=False)
        return ApiAnswer(response.status_code, payload)

    async def call(self, method: str, path: str, *, token: str, body: Any = None) -> ApiAnswer:
        # requests is blocking: keep the event loop (and other sessions) moving.
        return await anyio.to_thread.run_sync(self._call, method, path, token, body)
