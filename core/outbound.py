"""Outbound HTTP on httpcore (httpx's HTTP/1.1 layer), with a total deadline, a size limit,
and no database connection held.

A socket timeout bounds each read, not the fetch: a server that sends one byte a second never
trips it (httpx's timeouts are per read too). Here a watchdog shuts the socket down when the
deadline passes, wherever the fetch is waiting (connect, TLS handshake, headers, body), and the
body is read a chunk at a time against the deadline and the byte limit. Callers run
`db_release()` before a fetch made on a request's behalf, so a slow server holds a thread, not
one of the pool's few connections.

A request is sent on a connection opened beforehand (`open_connection`: TCP to an address
already checked or a configured name, then TLS checked against the host name): httpcore's
HTTP/1.1 connection is made on that one socket and can open no other, so a request is never
sent twice and a failure to connect is known before anything leaves (at most once, core.http).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore2
import httpx2
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
    headers: httpx2.Headers
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


class _Alarms:
    """The process's one watchdog thread: a heap of deadlines, each fired when it passes.

    One long-lived thread instead of a `threading.Timer` per request: starting and joining a
    thread for every provider call cost more than the rest of the deadline's bookkeeping. A
    watchdog that ends first is only marked (its entry is skipped when it comes up); when
    the marked ones are most of the heap, it is rebuilt without them, so long deadlines do
    not pile up."""

    COMPACT_AT = 1024  # entries, before marked ones are dropped

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[list[Any]] = []  # [deadline, sequence, Watchdog | None]
        self._count = itertools.count()
        self._ended = 0  # marked entries still in the heap
        self._thread: threading.Thread | None = None

    def add(self, deadline: float, dog: Watchdog) -> list[Any]:
        entry = [deadline, next(self._count), dog]
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="outbound-watchdog", daemon=True
                )
                self._thread.start()
            if len(self._heap) >= self.COMPACT_AT and self._ended * 2 > len(self._heap):
                self._heap = [e for e in self._heap if e[2] is not None]
                heapq.heapify(self._heap)
                self._ended = 0
            heapq.heappush(self._heap, entry)
            if self._heap[0] is entry:  # sooner than what the thread waits for
                self._cond.notify()
        return entry

    def end(self, entry: list[Any]) -> None:
        with self._cond:
            if entry[2] is not None:
                entry[2] = None
                self._ended += 1

    def __len__(self) -> int:
        return len(self._heap)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][2] is None:
                        heapq.heappop(self._heap)  # ended before its deadline
                        self._ended -= 1
                    if not self._heap:
                        self._cond.wait()
                        continue
                    left = self._heap[0][0] - time.monotonic()
                    if left <= 0:
                        entry = heapq.heappop(self._heap)
                        dog, entry[2] = entry[2], None  # fired: not to be ended again
                        break
                    self._cond.wait(left)
            if dog is not None:
                dog._fire()


_alarms = _Alarms()


def _alarms_after_fork() -> None:
    # A forked child (a prefork worker) has no copy of the thread, and the condition's lock
    # may have been held by it at the fork: the child starts its own.
    global _alarms
    _alarms = _Alarms()


os.register_at_fork(after_in_child=_alarms_after_fork)


class Watchdog:
    """Shuts `sock` down at `deadline` (from the process's watchdog thread), ending any wait
    on it. Once the `with` block is left it never fires."""

    def __init__(self, sock: socket.socket | None, deadline: float):
        self.sock = sock
        self.fired = False
        self.deadline = deadline
        self._lock = threading.Lock()
        self._ended = False
        self._entry: list[Any] | None = None
        self._alarms: _Alarms | None = None

    def _fire(self) -> None:
        with self._lock:
            if self._ended:
                return
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
        self._alarms = _alarms
        self._entry = self._alarms.add(self.deadline, self)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._ended = True
        if self._alarms is not None and self._entry is not None:
            self._alarms.end(self._entry)


@contextmanager
def watchdog(sock: socket.socket | None, deadline: float) -> Iterator[Watchdog]:
    with Watchdog(sock, deadline) as dog:
        yield dog


class _Stream(httpcore2.NetworkStream):
    """An open socket (TLS done already) as httpx's transport reads and writes it."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            self.sock.settimeout(timeout)
            return self.sock.recv(max_bytes)
        except TimeoutError as exc:
            raise httpcore2.ReadTimeout(exc) from exc
        except OSError as exc:
            raise httpcore2.ReadError(exc) from exc

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(buffer)
        except TimeoutError as exc:
            raise httpcore2.WriteTimeout(exc) from exc
        except OSError as exc:
            raise httpcore2.WriteError(exc) from exc

    def close(self) -> None:
        self.sock.close()

    def start_tls(self, ssl_context: Any, server_hostname: Any = None, timeout: Any = None):
        return self  # open_connection made the TLS session, checked against the host

    def get_extra_info(self, info: str) -> Any:
        return self.sock if info == "socket" else None


@dataclass
class Connection:
    """A connection opened to `ip` for `host` (TLS for https), for one request."""

    sock: socket.socket
    host: str
    port: int
    secure: bool

    def close(self) -> None:
        self.sock.close()


def open_connection(
    *, address: str, port: int, host: str, secure: bool, timeout: float, dog: Watchdog | None = None
) -> Connection:
    """TCP to `address` (an address checked already, or a name), then for https TLS with SNI and the certificate checked against `host`;
    each step within `timeout`. Raises TimeoutError or OSError (ssl.SSLError included): the
    request never left. `dog`, when given, watches the socket from the moment it exists."""
    raw = socket.create_connection((address, port), timeout=timeout)
    sock: socket.socket = raw
    try:
        if dog is not None:
            dog.sock = raw
        if secure:
            sock = ssl.create_default_context().wrap_socket(
                raw, server_hostname=host, do_handshake_on_connect=False
            )
            if dog is not None:
                dog.sock = sock  # wrap_socket took over raw's descriptor
            sock.settimeout(timeout)
            sock.do_handshake()
    except BaseException:
        sock.close()
        raise
    return Connection(sock, host, port, secure)


def exchange(
    conn: Connection,
    method: str,
    target: str,
    *,
    headers: dict[str, str],
    body: bytes | None,
    deadline: float,
    max_bytes: int,
    dog: Watchdog,
) -> Answer:
    """Send one request on `conn` with httpcore (httpx's HTTP/1.1 layer) and read the answer:
    the whole of it before `deadline` (`dog` watches `conn`) and at most `max_bytes` of body,
    or DeadlineExceeded / TooLarge / FetchFailed. `target` is the path and query. The body is
    read as sent (the request asks for no content coding).

    The request is httpcore's on the one connection, not httpx's through a pool handed that
    connection: the same bytes on the wire (`wire_headers`), without the pool, the URL parsing
    and the model mapping around it, which were half of a provider call's CPU."""
    dog.sock = conn.sock
    scheme = b"https" if conn.secure else b"http"
    host = conn.host.encode("idna") if not conn.host.isascii() else conn.host.encode()
    request = httpcore2.Request(
        method.encode("ascii"),
        httpcore2.URL(scheme=scheme, host=host, port=conn.port, target=target.encode()),
        headers=wire_headers(method, conn, headers, body),
        content=body or b"",
        extensions={
            "timeout": dict.fromkeys(("connect", "read", "write", "pool"), remaining(deadline))
        },
    )
    connection = httpcore2.HTTP11Connection(
        origin=httpcore2.Origin(scheme, host, conn.port), stream=_Stream(conn.sock)
    )
    try:
        response = connection.handle_request(request)
        try:
            received = httpx2.Headers(response.headers)
            declared = received.get("Content-Length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise TooLarge(f"{declared} bytes, over the {max_bytes}-byte limit")
            parts: list[bytes] = []
            size = 0
            # Chunks as they arrive, so a drip-fed body is checked against the clock each time.
            for chunk in response.iter_stream():
                remaining(deadline)
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"over the {max_bytes}-byte limit")
                parts.append(chunk)
        finally:
            response.close()
        if dog.fired:
            raise DeadlineExceeded("deadline passed while reading the body")
        return Answer(response.status, received, b"".join(parts))
    except _TRANSPORT_ERRORS as exc:
        if dog.fired or isinstance(exc, httpcore2.TimeoutException):
            raise DeadlineExceeded(f"{conn.host}: no whole answer before the deadline") from exc
        raise FetchFailed(f"{conn.host}: {type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()


# What httpx reports as its TransportError, at httpcore's level.
_TRANSPORT_ERRORS = (
    httpcore2.TimeoutException,
    httpcore2.NetworkError,
    httpcore2.ProtocolError,
    httpcore2.UnsupportedProtocol,
    httpcore2.ProxyError,
)


@functools.lru_cache(maxsize=256)
def _netloc(secure: bool, host: str, port: int) -> bytes:
    # httpx's own `Host` value: the name lower-cased (IDNA), an IPv6 address in brackets, the
    # port only when it is not the scheme's.
    return httpx2.URL(scheme="https" if secure else "http", host=host, port=port).netloc


def wire_headers(
    method: str, conn: Connection, headers: dict[str, str], body: bytes | None
) -> list[tuple[bytes, bytes]]:
    """The request's headers in the order httpx's `Request` sends them: `Host` first (unless
    given), `Accept-Encoding: identity` (http.client's default, kept: no compression, so the
    limit is on the bytes we hold) and the caller's in their order, then the body's
    `Content-Length` (an empty POST, PUT or PATCH says 0, right after `Host`)."""
    given = {"Accept-Encoding": "identity", **headers}
    names = {name.lower() for name in given}
    front: list[tuple[bytes, bytes]] = []
    if "host" not in names:
        front.append((b"Host", _netloc(conn.secure, conn.host, conn.port)))
    wire = [(name.encode("ascii"), value.encode("ascii")) for name, value in given.items()]
    if body and "content-length" not in names:
        wire.append((b"Content-Length", str(len(body)).encode()))
    elif not body and method.upper() in ("POST", "PUT", "PATCH"):
        if "content-length" not in names and "transfer-encoding" not in names:
            front.append((b"Content-Length", b"0"))
    return front + wire


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
    with watchdog(None, deadline) as dog:
        try:
            conn = open_connection(
                address=ip,
                port=port,
                host=host,
                secure=secure,
                timeout=remaining(deadline),
                dog=dog,
            )
        except OSError as exc:
            if dog.fired or isinstance(exc, TimeoutError):
                raise DeadlineExceeded(f"no connection to {ip}:{port} before the deadline") from exc
            raise FetchFailed(f"could not connect to {ip}:{port}: {exc}") from exc
        try:
            return exchange(
                conn,
                "GET",
                path,
                headers=headers,
                body=None,
                deadline=deadline,
                max_bytes=max_bytes,
                dog=dog,
            )
        finally:
            conn.close()


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
