"""Outbound HTTP with a total deadline, a size limit, and no database connection held.

A socket timeout bounds each read, not the fetch: a server that sends one byte a second never
trips it. Here a watchdog shuts the socket down when the deadline passes, wherever the fetch
is waiting (connect, TLS handshake, headers, body), and the body is read a chunk at a time
against the deadline and the byte limit. Callers run `db_release()` before a fetch made on a
request's behalf, so a slow server holds a thread, not one of the pool's few connections.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connections

logger = logging.getLogger(__name__)

CHUNK = 64 * 1024


class FetchFailed(Exception):
    """The fetch gave no usable answer (refused, reset, bad TLS, malformed HTTP)."""


class DeadlineExceeded(FetchFailed):
    """The whole fetch did not finish before its deadline."""


class TooLarge(FetchFailed):
    """The answer is over its byte limit (declared or read)."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


def deadline_in(seconds: float) -> float:
    """A deadline on the monotonic clock, `seconds` from now."""
    return time.monotonic() + seconds


def remaining(deadline: float) -> float:
    """Seconds left before `deadline`, or DeadlineExceeded."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("deadline passed")
    return left


class Watchdog:
    """Shuts `sock` down at `deadline` (from a timer thread), ending any wait on it."""

    def __init__(self, sock: socket.socket | None, deadline: float):
        self.sock = sock
        self.fired = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self.sock is None:
                return
            try:
                # The plain socket's shutdown, also for an SSLSocket: its own would drop the
                # TLS state under the thread that is reading.
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: nothing waits on it

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


@contextmanager
def watchdog(sock: socket.socket, deadline: float) -> Iterator[Watchdog]:
    with Watchdog(sock, deadline) as dog:
        yield dog


def read_body(
    response: http.client.HTTPResponse, *, deadline: float, max_bytes: int, dog: Watchdog
) -> bytes:
    """The body, at most `max_bytes`, read before `deadline`, or TooLarge / DeadlineExceeded.
    Chunks as they arrive (read1), so a drip-fed body is checked against the clock each time."""
    declared = response.getheader("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TooLarge(f"{declared} bytes, over the {max_bytes}-byte limit")
    parts: list[bytes] = []
    size = 0
    while True:
        remaining(deadline)
        chunk = response.read1(CHUNK)
        if dog.fired:
            raise DeadlineExceeded("deadline passed while reading the body")
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise TooLarge(f"over the {max_bytes}-byte limit")
        parts.append(chunk)
    return b"".join(parts)


def get(
    *,
    ip: str,
    port: int,
    host: str,
    path: str,
    secure: bool,
    headers: dict[str, str],
    deadline: float,
    max_bytes: int,
) -> Answer:
    """GET `path` from the already checked address `ip` (no second lookup to rebind), with
    SNI and certificate checked against `host` for https, no redirect followed, the whole of
    it within `deadline` (monotonic) and at most `max_bytes` of body."""
    try:
        raw = socket.create_connection((ip, port), timeout=remaining(deadline))
    except TimeoutError as exc:
        raise DeadlineExceeded(f"no connection to {ip}:{port} before the deadline") from exc
    except OSError as exc:
        raise FetchFailed(f"could not connect to {ip}:{port}: {exc}") from exc
    sock: socket.socket = raw
    try:
        with watchdog(raw, deadline) as dog:
            try:
                if secure:
                    sock = ssl.create_default_context().wrap_socket(
                        raw, server_hostname=host, do_handshake_on_connect=False
                    )
                    dog.sock = sock  # wrap_socket took over raw's descriptor
                    sock.settimeout(remaining(deadline))
                    sock.do_handshake()
                conn = http.client.HTTPConnection(host, port, timeout=remaining(deadline))
                conn.sock = sock
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                body = read_body(response, deadline=deadline, max_bytes=max_bytes, dog=dog)
                return Answer(response.status, response.headers, body)
            except (OSError, http.client.HTTPException) as exc:
                if dog.fired or isinstance(exc, TimeoutError):
                    raise DeadlineExceeded(f"{host}: no whole answer before the deadline") from exc
                raise FetchFailed(f"{host}: {type(exc).__name__}: {exc}") from exc
    finally:
        sock.close()


def get_any(
    *,
    ips: list[str],
    port: int,
    host: str,
    path: str,
    secure: bool,
    headers: dict[str, str],
    deadline: float,
    max_bytes: int,
) -> Answer:
    """`get` from each checked address of `host` in turn, all within the one `deadline`: the
    first answer wins. Past the deadline or the size limit no other address is tried; if
    every address fails, the last failure is raised."""
    last = FetchFailed(f"{host} has no address")
    for ip in ips:
        try:
            return get(
                ip=ip,
                port=port,
                host=host,
                path=path,
                secure=secure,
                headers=headers,
                deadline=deadline,
                max_bytes=max_bytes,
            )
        except (DeadlineExceeded, TooLarge):
            raise
        except FetchFailed as exc:
            last = exc
    raise last


def db_release() -> bool:
    """Give this thread's database connections back before a slow outbound wait (Django opens
    one again on the next query). One inside a transaction cannot be given back: that is a
    fetch in the wrong place, logged. Whether every connection was released."""
    released = True
    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:
            logger.warning("outbound fetch inside a transaction holds connection %s", conn.alias)
            released = False
        else:
            conn.close()
    return released
