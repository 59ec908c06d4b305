"""The one way a Web3 client on a JSON-RPC URL is built (the chain node, the bundler, the
relayer's node): bounded by a timeout, with or without web3's own retries, with headers
computed per request when asked (the caller's trace context); and JSON-RPC batches sent to
several nodes at once from one thread (`send_batches`)."""

from __future__ import annotations

import base64
import http.client
import json
import select
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import requests
from web3 import Web3

K = TypeVar("K")
T = TypeVar("T")


class _HTTPProvider(Web3.HTTPProvider):
    """web3's HTTP provider with headers computed per request (`headers()`), e.g. the caller's
    trace context, which changes from one call to the next on one client."""

    def __init__(self, *args: Any, headers: Callable[[], dict[str, str]], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._headers = headers

    def get_request_headers(self) -> dict[str, str]:
        return {**super().get_request_headers(), **self._headers()}


def http_web3(
    url: str,
    *,
    timeout: float,
    retries: bool = False,
    headers: Callable[[], dict[str, str]] | None = None,
) -> Web3:
    """Web3 on `url`, each request bounded by `timeout` seconds. Without `retries` a dropped
    connection is an error at once, so the timeout bounds the whole call; with them web3
    retries its idempotent methods a few times (reads where an agent can wait a little)."""
    kwargs: dict[str, Any] = {"request_kwargs": {"timeout": timeout}}
    if not retries:
        kwargs["exception_retry_configuration"] = None
    if headers is not None:
        return Web3(_HTTPProvider(url, headers=headers, **kwargs))
    return Web3(Web3.HTTPProvider(url, **kwargs))


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
    conn: http.client.HTTPConnection | None = None
    reused: bool = False
    started: float = 0.0
    answer: BatchAnswer = field(default_factory=BatchAnswer)


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
    """An idle connection to `url` kept by this thread, or a new one (not yet connected)."""
    pool = _idle.__dict__.setdefault("by_url", {}).setdefault(url, [])
    while pool:
        conn = pool.pop()
        # Readable while idle means the node closed it (or sent what nobody asked for).
        if conn.sock is not None and not select.select([conn.sock], [], [], 0)[0]:
            conn.sock.settimeout(timeout)
            return conn, True
        conn.close()
    parts = urlsplit(url)
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout), False
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout), False


def _send(flight: _InFlight, timeout: float) -> None:
    flight.conn, flight.reused = _connection(flight.url, timeout)
    flight.started = time.perf_counter()
    if flight.conn.sock is None:
        try:
            flight.conn.connect()
        except TimeoutError as exc:
            raise requests.ConnectTimeout(f"no connection within {timeout:g}s") from exc
        except OSError as exc:
            raise requests.ConnectionError(str(exc)) from exc
    parts = urlsplit(flight.url)
    headers = {"Content-Type": "application/json"}
    if parts.username is not None:  # https://user:key@host/…, as requests would send it
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        flight.conn.request("POST", target, body=flight.body, headers=headers)
    except (OSError, http.client.HTTPException) as exc:
        raise requests.ConnectionError(f"connection lost while sending: {exc!r}") from exc


def _receive(flight: _InFlight, deadline: float) -> Any:
    conn = flight.conn
    assert conn is not None and conn.sock is not None
    conn.sock.settimeout(max(0.001, deadline - time.monotonic()))
    try:
        response = conn.getresponse()
        raw = response.read()
    except TimeoutError as exc:
        raise requests.ReadTimeout("timed out") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise requests.ConnectionError(f"connection lost before the answer: {exc!r}") from exc
    if response.will_close:
        conn.close()
    else:
        _idle.__dict__.setdefault("by_url", {}).setdefault(flight.url, []).append(conn)
    flight.conn = None  # kept or closed: not this flight's to close any more
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
            if flight.conn is not None:
                flight.conn.close()
                flight.conn = None

    def receive(flight: _InFlight) -> None:
        try:
            flight.answer.body = _receive(flight, deadline)
        except (requests.RequestException, ValueError) as exc:
            flight.answer.error = exc
        finally:
            if flight.conn is not None:
                flight.conn.close()  # an answer not read to its end spoils the connection
                flight.conn = None
            flight.answer.seconds = time.perf_counter() - flight.started

    for flight in flights.values():
        send(flight)
    try:
        beside = meanwhile() if meanwhile else None
        for flight in flights.values():
            if flight.answer.error is None:
                receive(flight)
            stale = isinstance(flight.answer.error, requests.ConnectionError) and flight.reused
            if stale and time.monotonic() < deadline:
                flight.answer = BatchAnswer()
                send(flight)  # a fresh connection this time (the stale one is closed)
                if flight.answer.error is None:
                    receive(flight)
    finally:
        for flight in flights.values():
            if flight.conn is not None:
                flight.conn.close()
    return {key: flight.answer for key, flight in flights.items()}, beside
