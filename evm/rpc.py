"""The one way a Web3 client on a JSON-RPC URL is built (the chain node, the bundler, the
relayer's node): bounded by a timeout, with or without web3's own retries, with headers
computed per request when asked (the caller's trace context); and JSON-RPC batches sent to
several nodes at once from one thread (`send_batches`).

When the process exports spans, each call (a request, a batch, a `send_batches`) is a client
span named after its JSON-RPC method, with `rpc.system` and `rpc.method`: the process's tracing
set-up hands a span factory to `trace_calls` (picnic.otel). Without it nothing is traced and no
OpenTelemetry module is needed here."""

from __future__ import annotations

import base64
import http.client
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import requests
from web3 import Web3
from web3.providers.rpc.utils import ExceptionRetryConfiguration

K = TypeVar("K")
T = TypeVar("T")

# `(name, **attributes) -> context manager`: a client span current for the block (the caller's
# trace context then names it); None while the process exports no spans.
SpanFactory = Callable[..., AbstractContextManager[Any]]
_client_span: SpanFactory | None = None


def trace_calls(client_span: SpanFactory | None) -> None:
    """Make every JSON-RPC call a client span (None: stop)."""
    global _client_span
    _client_span = client_span


def _span(urls: Iterable[str], methods: Iterable[str]) -> AbstractContextManager[Any]:
    if _client_span is None:
        return nullcontext()
    names = sorted(set(methods))
    attributes: dict[str, Any] = {"rpc.system": "jsonrpc", "rpc.method": ",".join(names)}
    hosts = {urlsplit(url).netloc.rpartition("@")[2] for url in urls}
    if len(hosts) == 1:
        host, _, port = hosts.pop().rpartition(":")
        attributes["server.address"] = host or port
        if host and port.isdigit():
            attributes["server.port"] = int(port)
    return _client_span(names[0] if len(names) == 1 else "jsonrpc batch", **attributes)


class _HTTPProvider(Web3.HTTPProvider):
    """web3's HTTP provider with headers computed per request (`headers()`), e.g. the caller's
    trace context, which changes from one call to the next on one client; each request or
    batch a client span when the process exports spans."""

    def __init__(
        self, *args: Any, headers: Callable[[], dict[str, str]] | None = None, **kwargs: Any
    ):
        super().__init__(*args, **kwargs)
        self._headers = headers

    def get_request_headers(self) -> dict[str, str]:
        extra = self._headers() if self._headers is not None else {}
        return {**super().get_request_headers(), **extra}

    def make_request(self, method, params):
        with _span([self.endpoint_uri], [method]):
            return super().make_request(method, params)

    def make_batch_request(self, batch_requests):
        with _span([self.endpoint_uri], [method for method, _ in batch_requests]):
            return super().make_batch_request(batch_requests)


def http_web3(
    url: str,
    *,
    timeout: float,
    retries: bool = False,
    headers: Callable[[], dict[str, str]] | None = None,
) -> Web3:
    """Web3 on `url`, each request bounded by `timeout` seconds. Without `retries` a dropped
    connection is an error at once, so the timeout bounds the whole call; with them web3
    retries its idempotent methods a few times after an HTTP error (a hosted RPC's 429 or 5xx;
    reads where an agent can wait a little), as its default does, but not after a timeout: a
    node that hung once would make the agent wait the whole timeout again on every retry."""
    kwargs: dict[str, Any] = {"request_kwargs": {"timeout": timeout}}
    if retries:
        kwargs["exception_retry_configuration"] = ExceptionRetryConfiguration(
            errors=(ConnectionError, requests.HTTPError)  # web3's default, less Timeout
        )
    else:
        kwargs["exception_retry_configuration"] = None
    return Web3(_HTTPProvider(url, headers=headers, **kwargs))


# --- JSON-RPC batches to several nodes at once, from one thread --------------------------------

# Idle keep-alive connections of this thread, by URL: a request made in a server's worker
# thread reuses the connection its previous request opened (a new TCP connection per call
# costs more than a local node's answer).
_idle = threading.local()


@dataclass
class BatchAnswer:
    """One node's answer to its batch: the decoded JSON body, or the transport's error
    (requests' exception types, so callers word and count them as they do web3's)."""

    body: Any = None
    error: Exception | None = None
    seconds: float = 0.0


@dataclass
class _InFlight:
    url: str
    body: bytes
    request: bytes = b""
    sock: socket.socket | None = None
    reused: bool = False
    started: float = 0.0
    answer: BatchAnswer = field(default_factory=BatchAnswer)


def _connection(url: str, timeout: float) -> tuple[socket.socket | None, bool]:
    """An idle kept-alive socket to `url` of this thread (reused: True), or None (connect)."""
    pool = _idle.__dict__.setdefault("by_url", {}).setdefault(url, [])
    while pool:
        sock = pool.pop()
        # Readable while idle means the node closed it (or sent what nobody asked for).
        if not select.select([sock], [], [], 0)[0]:
            sock.settimeout(timeout)
            return sock, True
        sock.close()
    return None, False


def _connect(url: str, timeout: float) -> socket.socket:
    parts = urlsplit(url)
    https = parts.scheme == "https"
    try:
        sock = socket.create_connection(
            (parts.hostname, parts.port or (443 if https else 80)), timeout=timeout
        )
    except TimeoutError as exc:
        raise requests.ConnectTimeout(f"no connection within {timeout:g}s") from exc
    except OSError as exc:
        raise requests.ConnectionError(str(exc)) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if https:
        try:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
        except OSError as exc:
            sock.close()
            raise requests.ConnectionError(str(exc)) from exc
    return sock


def _request(url: str, body: bytes) -> bytes:
    """The whole HTTP request in one buffer: http.client writes the headers and the body in
    two sends, and with TCP_NODELAY the node is woken twice (a context switch each on a busy
    host)."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    lines = [
        f"POST {target} HTTP/1.1",
        f"Host: {parts.netloc.rpartition('@')[2]}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if parts.username is not None:  # https://user:key@host/…, as requests would send it
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        lines.append("Authorization: Basic " + base64.b64encode(credentials.encode()).decode())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _prepare(flight: _InFlight, timeout: float) -> None:
    """The flight's request bytes and its kept connection, if any: done for every flight before
    the first is sent, because a node woken by its request may take this thread's core, and the
    next node is then asked only once this thread runs again."""
    flight.request = _request(flight.url, flight.body)
    flight.sock, flight.reused = _connection(flight.url, timeout)


def _send(flight: _InFlight, timeout: float) -> None:
    flight.started = time.perf_counter()
    if flight.sock is None:
        flight.sock = _connect(flight.url, timeout)
    try:
        flight.sock.sendall(flight.request)
    except OSError as exc:
        raise requests.ConnectionError(f"connection lost while sending: {exc!r}") from exc


def _receive(flight: _InFlight, deadline: float) -> Any:
    sock = flight.sock
    assert sock is not None
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    response = http.client.HTTPResponse(sock, method="POST")
    try:
        response.begin()
        raw = response.read()
    except TimeoutError as exc:
        raise requests.ReadTimeout("timed out") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise requests.ConnectionError(f"connection lost before the answer: {exc!r}") from exc
    finally:
        response.close()  # its file object; the socket stays open
    if not response.will_close:
        _idle.__dict__.setdefault("by_url", {}).setdefault(flight.url, []).append(sock)
        flight.sock = None  # kept: not this flight's to close any more
    if response.status >= 400:
        answer = requests.Response()
        answer.status_code, answer._content = response.status, raw
        raise requests.HTTPError(f"HTTP {response.status}", response=answer)
    return json.loads(raw)


def send_batches(
    batches: Mapping[K, tuple[str, list[tuple[str, list]]]],
    *,
    timeout: float,
    meanwhile: Callable[[], T] | None = None,
) -> tuple[dict[K, BatchAnswer], T | None]:
    """Each `(url, calls)` of `batches` as one JSON-RPC batch POST, all from this thread: every
    request is written first, then `meanwhile()` runs, then the answers are read, so the nodes
    work at the same time while no second Python thread competes for the GIL. Bounded by
    `timeout` overall (a node still silent then gets a ReadTimeout). A node that refuses, hangs,
    drops the connection or answers garbage gets its error in its BatchAnswer; the others
    still get theirs. A kept connection the node closed meanwhile is retried once, fresh."""
    with _span(
        [url for url, _ in batches.values()],
        [method for _, calls in batches.values() for method, _ in calls],
    ):
        return _send_batches(batches, timeout=timeout, meanwhile=meanwhile)


def _send_batches(
    batches: Mapping[K, tuple[str, list[tuple[str, list]]]],
    *,
    timeout: float,
    meanwhile: Callable[[], T] | None,
) -> tuple[dict[K, BatchAnswer], T | None]:
    deadline = time.monotonic() + timeout
    flights = {
        key: _InFlight(
            url,
            json.dumps(
                [
                    {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
                    for i, (method, params) in enumerate(calls)
                ]
            ).encode(),
        )
        for key, (url, calls) in batches.items()
    }

    def send(flight: _InFlight) -> None:
        try:
            _send(flight, timeout)
        except requests.RequestException as exc:
            flight.answer.error = exc
            if flight.sock is not None:
                flight.sock.close()
                flight.sock = None

    def receive(flight: _InFlight) -> None:
        try:
            flight.answer.body = _receive(flight, deadline)
        except (requests.RequestException, ValueError) as exc:
            flight.answer.error = exc
        finally:
            if flight.sock is not None:
                flight.sock.close()  # not kept: closing, or an answer not read to its end
                flight.sock = None
            flight.answer.seconds = time.perf_counter() - flight.started

    try:
        for flight in flights.values():
            _prepare(flight, timeout)
        for flight in flights.values():
            send(flight)
        beside = meanwhile() if meanwhile else None
        for flight in flights.values():
            if flight.answer.error is None:
                receive(flight)
            stale = isinstance(flight.answer.error, requests.ConnectionError) and flight.reused
            if stale and time.monotonic() < deadline:
                flight.answer = BatchAnswer()
                flight.reused = False
                send(flight)  # a fresh connection this time (the stale one is closed)
                if flight.answer.error is None:
                    receive(flight)
    finally:
        for flight in flights.values():
            if flight.sock is not None:
                flight.sock.close()
    return {key: flight.answer for key, flight in flights.items()}, beside
