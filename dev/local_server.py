"""The base of the local HTTP servers that stand in for providers (X DMs, the Responses API,
a bundler) in tests and `make run`: loopback only, threaded, able to answer JSON, hang until
stopped, drop the connection after reading the request, or drip an answer a byte at a time."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass
class Drip:
    """One answer dripped (`drip`): how long it is, how much of it went out, and whether the
    client hung up before the end (seen at the next write after it did)."""

    size: int
    sent: int = 0
    cut_off: threading.Event = field(default_factory=threading.Event)


def drip(
    handler: BaseHTTPRequestHandler,
    content_type: str,
    body: bytes,
    *,
    record: Drip,
    stop: threading.Event,
    started: threading.Event,
    interval: float = 1.0,
) -> None:
    """Answer 200 with `body` one byte every `interval` seconds (the slow client turned
    server: each read gets a byte well within any per-read timeout), until it is all sent,
    the client hangs up or `stop` is set. `started` is set once the first byte is out."""
    handler.close_connection = True
    try:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        for index in range(len(body)):
            handler.wfile.write(body[index : index + 1])
            record.sent += 1
            started.set()
            if stop.wait(interval):
                return
    except OSError:
        record.cut_off.set()


class LocalJsonServer:
    def __init__(self, *, port: int = 0):
        self._release = threading.Event()
        # The answers dripped so far (`drip_answer`), and set once one has started.
        self.drips: list[Drip] = []
        self.dripping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go in two writes: with Nagle on, the body waits for the client's
            # delayed ACK (~40 ms a request), which made every local provider look slow.
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server API
                server.on_get(self)

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                server.on_post(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def on_get(self, handler: BaseHTTPRequestHandler) -> None:
        self.send(handler, 405, b'{"error": "method not allowed"}')

    def on_post(self, handler: BaseHTTPRequestHandler) -> None:
        self.send(handler, 405, b'{"error": "method not allowed"}')

    # --- helpers for subclasses -----------------------------------------------------------

    @staticmethod
    def read_body(handler: BaseHTTPRequestHandler) -> bytes:
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))

    @staticmethod
    def send(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The caller went away (a worker killed mid-request): nobody is left to answer,
            # as for a real provider; not a failure of this server.
            handler.close_connection = True

    def send_json(self, handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        self.send(handler, status, json.dumps(payload).encode())

    def drip_answer(self, handler: BaseHTTPRequestHandler, content_type: str, body: bytes) -> None:
        """`drip` one byte a second, kept in `drips`, until the client hangs up or we stop."""
        record = Drip(size=len(body))
        self.drips.append(record)
        drip(
            handler,
            content_type,
            body,
            record=record,
            stop=self._release,
            started=self.dripping,
        )

    def hang(self) -> None:
        """Never answer (until the server stops)."""
        self._release.wait(600)

    @staticmethod
    def drop(handler: BaseHTTPRequestHandler) -> None:
        """Close the connection without answering, after the request was read."""
        handler.close_connection = True
        handler.connection.shutdown(2)
