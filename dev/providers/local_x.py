"""A local server speaking the X API v2 DM shape, for tests and `make run`.

Behaviour per server (`mode`) or per message (a marker in the text, handy in demos):
`ok` (201 with ids), `refuse` (403 problem), `hang` (reads the request, never answers),
`drop` (reads the request, closes the connection), `error` (503 after reading). Every request
it reads is recorded, so tests can count what really reached the provider.

    python -m dev.providers.local_x --port 8787
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from dev.local_server import LocalJsonServer

PATH = re.compile(r"^/2/dm_conversations/with/([^/]+)/messages$")
MARKERS = ("refuse", "hang", "drop", "error")


class LocalXServer(LocalJsonServer):
    def __init__(
        self, *, port: int = 0, token: str | None = None, mode: str = "ok", work_seconds: float = 0
    ):
        super().__init__(port=port)
        self.mode = mode
        # How long an accepted DM takes to answer (the soak test kills a worker mid-send).
        self.work_seconds = work_seconds
        self.token = token
        self.requests: list[dict[str, Any]] = []
        self.received = threading.Event()

    def on_post(self, handler: BaseHTTPRequestHandler) -> None:
        raw = self.read_body(handler)
        match = PATH.match(handler.path)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        text = body.get("text", "") if isinstance(body, dict) else ""
        self.requests.append(
            {
                "path": handler.path,
                "auth": handler.headers.get("Authorization"),
                "traceparent": handler.headers.get("traceparent"),
                "text": text,
            }
        )
        self.received.set()
        mode = next((m for m in MARKERS if f"[{m}]" in text), self.mode)
        if not match:
            return self.send_json(
                handler, 404, {"title": "Not Found", "detail": "no such route", "status": 404}
            )
        if self.token and handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self.send_json(
                handler,
                401,
                {
                    "title": "Unauthorized",
                    "type": "about:blank",
                    "status": 401,
                    "detail": "Unauthorized",
                },
            )
        if mode == "hang":
            return self.hang()
        if mode == "drop":
            return self.drop(handler)
        if mode == "error":
            return self.send_json(
                handler,
                503,
                {"title": "Service Unavailable", "status": 503, "detail": "Service Unavailable"},
            )
        if mode == "refuse" or not text:
            return self.send_json(
                handler,
                403,
                {
                    "title": "Forbidden",
                    "type": "about:blank",
                    "status": 403,
                    "detail": "You are not permitted to send Direct Messages to this user.",
                },
            )
        participant = match.group(1)
        if self.work_seconds:
            time.sleep(self.work_seconds)
        return self.send_json(
            handler,
            201,
            {
                "data": {
                    "dm_conversation_id": f"{participant}-1000",
                    "dm_event_id": str(uuid.uuid4().int >> 64),
                }
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Local X DM API server")
    parser.add_argument("--port", type=int, default=8787)
    parser.add_argument("--token")
    args = parser.parse_args()
    server = LocalXServer(port=args.port, token=args.token)
    print(f"local X DM API on {server.url}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
