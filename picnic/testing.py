"""A scriptable local JSON-RPC/HTTP server for fault-injection tests.

It speaks plain HTTP on 127.0.0.1 and, per request, answers as told: a JSON-RPC result, a
JSON-RPC error, an HTTP 5xx, bytes that are not JSON, a response that never comes (hang), or
a connection dropped after the request was read. Used by every adapter's tests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedServer:
    def __init__(self) -> None:
        self.mode = "result"
        self.result: Any = None
        self.error: dict[str, Any] = {"code": -32000, "message": "scripted error"}
        self.hang_seconds = 30.0
        self.requests: list[dict[str, Any]] = []
        self.handler: Callable[[dict[str, Any]], Any] | None = None
        self._release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    request = json.loads(body or b"{}")
                except ValueError:
                    request = {"raw": body.decode(errors="replace")}
                server.requests.append(request)
                server._answer(self, request)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def _send(self, handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _answer(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        rpc_id = request.get("id") if isinstance(request, dict) else None
        if self.mode == "hang":
            self._release.wait(self.hang_seconds)
            return
        if self.mode == "drop":
            handler.close_connection = True
            handler.connection.shutdown(2)
            return
        if self.mode == "http500":
            self._send(handler, 500, b'{"message": "internal error"}')
        elif self.mode == "garbage":
            self._send(handler, 200, b"<html>502 Bad Gateway</html>")
        elif self.mode == "rpc_error":
            self._send(
                handler,
                200,
                json.dumps({"jsonrpc": "2.0", "id": rpc_id, "error": self.error}).encode(),
            )
        else:
            result = self.handler(request) if self.handler else self.result
            self._send(
                handler,
                200,
                json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}).encode(),
            )


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.2
) -> Any:
    """Poll `predicate` until truthy; raise AssertionError with the last value on timeout."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    if not value:
        raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
    return value


def database_url() -> str:
    """A DATABASE_URL for a subprocess (e.g. a real Celery worker) to reach the test database."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "postgresql":
        user = db["USER"] or "postgres"
        return f"postgres://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


def start_celery_worker(*, queue: str, log_path, env: dict[str, str] | None = None):
    """A real `celery worker` process on `queue`, sharing the test database and broker."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from django.conf import settings

    environ = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        **(env or {}),
    }
    log = open(log_path, "w")  # noqa: SIM115 - closed by the caller via proc.log
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "picnic",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
        ],
        cwd=Path(settings.BASE_DIR),
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc.log = log
    return proc
