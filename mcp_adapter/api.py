"""The adapter's only way in: our DRF API, called with the caller's bearer token."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx2
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


# At most this many calls to the API at once per process (the worker threads the calls had
# before, anyio's default); a call that waits longer than its timeout for one is a 503.
MAX_CONNECTIONS = 40


def query_string(params: dict[str, Any]) -> str:
    """A GET's arguments as the query (None left out, a list as repeated keys, other values
    as their str(): `True` is "True"), the way the API has always been sent them."""
    pairs = []
    for key, value in params.items():
        values = value if isinstance(value, list | tuple) else [value]
        pairs += [(key, str(v)) for v in values if v is not None]
    return urlencode(pairs)


class PicnicApi:
    """Calls on one shared httpx.AsyncClient (a bounded pool, timeouts), in the event loop:
    no thread and no blocking call. A client belongs to the event loop it was made in (its
    connections do), so a second loop (a test, a restarted server) gets its own."""

    def __init__(self, base_url: str | None = None, timeout: float | None = None):
        self.base_url = (base_url or settings.MCP_API_URL).rstrip("/")
        self.timeout = timeout or settings.MCP_API_TIMEOUT_SECONDS
        self._client: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx2.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx2.AsyncClient(
                timeout=self.timeout,
                limits=httpx2.Limits(
                    max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
                ),
                follow_redirects=True,
                trust_env=False,
            )
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def call(self, method: str, path: str, *, token: str, body: Any = None) -> ApiAnswer:
        return await self._call(method, path, token, body)

    async def _call(self, method: str, path: str, token: str, body: Any) -> ApiAnswer:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        headers.update(tracing.outgoing_headers())  # the API continues the caller's trace
        if isinstance(body, dict) and isinstance(body.get("idempotency_key"), str):
            # A keyed write is safe to send again: a load balancer in front of the API
            # (HAProxy, docs/deploy.md) retries only requests that say so.
            headers["Idempotency-Key"] = body["idempotency_key"]
        url = self.base_url + path
        if method == "GET" and body:
            url += "?" + query_string(body)
        try:
            response = await self._http().request(
                method, url, json=body if method != "GET" else None, headers=headers
            )
        except httpx2.HTTPError as exc:
            return ApiAnswer(503, {"detail": f"The Picnic API is unreachable: {exc}"})
        try:
            payload = response.json()
        except ValueError:
            detail = f"The Picnic API answered {response.status_code} without JSON"
            return ApiAnswer(response.status_code, {"detail": detail}, is_json=False)
        return ApiAnswer(response.status_code, payload)
