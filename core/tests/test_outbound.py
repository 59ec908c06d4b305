"""Outbound fetches end by a total deadline and a byte limit (core/outbound.py), whatever pace
the other end keeps: a provider's answer served one byte a second by a real local server is
cut off at the client's timeout, and a fetch gives its database connection back first."""

from __future__ import annotations

import socket
import threading

import httpx2
import pytest
from django.db import connection, transaction

from core import outbound
from core.http import JsonHttpClient, OutcomeUnknown
from dev.testing import ScriptedServer

TIMEOUT = 2.0


def test_a_provider_answer_dripped_a_byte_a_second_is_cut_off_at_the_timeout():
    """Each byte comes well within the per-read timeout: only a deadline on the whole request
    ends it (before, `response.read()` waited for all of it, ~90 s here)."""
    with ScriptedServer() as server:
        server.mode = "drip"
        server.result = "x" * 50
        client = JsonHttpClient(server.url, timeout=TIMEOUT, provider="prices")
        with pytest.raises(OutcomeUnknown, match=f"no answer within {TIMEOUT:g}s"):
            client.call("POST", "/", body={"jsonrpc": "2.0", "id": 1, "method": "m"})
        [record] = server.drips
        assert record.cut_off.wait(10)  # we hung up ...
        assert 0 < record.sent < record.size  # ... part way through the answer


def test_a_provider_answer_over_the_byte_limit_is_refused():
    with ScriptedServer() as server:
        server.result = "x" * 200
        client = JsonHttpClient(server.url, timeout=TIMEOUT, provider="prices", max_bytes=100)
        with pytest.raises(OutcomeUnknown, match="over the 100-byte limit"):
            client.call("POST", "/", body={"jsonrpc": "2.0", "id": 1, "method": "m"})
        server.result = "small"
        assert client.call("POST", "/", body={"id": 1}).json()["result"] == "small"


WIRE_CASES = [
    ("POST", "127.0.0.1", 8080, False, {"Content-Type": "application/json"}, b'{"a": 1}'),
    ("POST", "127.0.0.1", 8080, False, {"Authorization": "Bearer t"}, None),
    ("PUT", "api.example.com", 443, True, {}, b""),
    ("PATCH", "API.Example.com", 8443, True, {"Content-Length": "0"}, None),
    ("GET", "api.example.com", 80, False, {"Accept": "application/json"}, None),
    ("GET", "::1", 443, True, {"Host": "example.org", "X-Trace": "1"}, None),
    ("DELETE", "2001:db8::1", 9000, False, {}, b"x"),
    (
        "POST",
        "example.com",
        80,
        False,
        {"accept-encoding": "gzip", "Transfer-Encoding": "chunked"},
        None,
    ),
]


@pytest.mark.parametrize(("method", "host", "port", "secure", "headers", "body"), WIRE_CASES)
def test_a_request_carries_the_headers_httpx_would_send_in_its_order(
    method, host, port, secure, headers, body
):
    # The request is httpcore's now; what leaves must be what httpx's Request sent.
    url = httpx2.URL(scheme="https" if secure else "http", host=host, port=port, raw_path=b"/p")
    expected = httpx2.Request(
        method, url, headers={"Accept-Encoding": "identity", **headers}, content=body
    ).headers.raw
    conn = outbound.Connection(sock=None, host=host, port=port, secure=secure)  # type: ignore[arg-type]
    assert outbound.wire_headers(method, conn, headers, body) == expected


def test_a_provider_sees_the_request_as_httpx_sent_it():
    with ScriptedServer() as server:
        server.result = "ok"
        client = JsonHttpClient(server.url, timeout=TIMEOUT, provider="prices")
        answer = client.call("POST", "/rpc?x=1", body={"id": 1}, headers={"X-Key": "k"})
        assert (answer.status, answer.json()["result"]) == (200, "ok")
        [seen] = server.headers
        port = server.url.rsplit(":", 1)[1].rstrip("/")
        assert list(seen.items())[:2] == [
            ("Host", f"127.0.0.1:{port}"),
            ("Accept-Encoding", "identity"),
        ]
        assert seen["Content-Length"] == str(len(b'{"id": 1}')) and seen["X-Key"] == "k"
        assert server.requests == [{"id": 1}]


@pytest.mark.django_db(transaction=True)
def test_a_fetch_gives_its_database_connection_back_first():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert connection.connection is not None
    assert outbound.db_release() is True
    assert connection.connection is None
    with connection.cursor() as cursor:  # the next query opens one again
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_a_fetch_inside_a_transaction_cannot_give_its_connection_back(caplog):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        assert outbound.db_release() is False
        assert connection.connection is not None  # the transaction is left alone
    assert "outbound fetch inside a transaction" in caplog.text


def test_a_status_line_dripped_a_byte_a_second_is_cut_off_at_the_deadline():
    """The deadline holds before the body too: a server that drips its status line and
    headers (http.client reads them line by line, each read well within its timeout)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 1\r\n\r\nx"
    sent: list[int] = []
    hung_up = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        peer, _ = listener.accept()
        with peer:
            peer.recv(4096)  # the request
            try:
                for index in range(len(head)):
                    peer.sendall(head[index : index + 1])
                    sent.append(index)
                    if hung_up.wait(1.0):
                        return
            except OSError:
                hung_up.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        with pytest.raises(outbound.DeadlineExceeded):
            outbound.get(
                ip="127.0.0.1",
                port=listener.getsockname()[1],
                host="127.0.0.1",
                path="/",
                secure=False,
                headers={},
                deadline=outbound.deadline_in(TIMEOUT),
                max_bytes=100,
            )
        assert hung_up.wait(10)
        assert len(sent) < len(head)
    finally:
        hung_up.set()
        server.join(5)
        listener.close()


def _answering_once_per_connection() -> tuple[socket.socket, list[int]]:
    """A listener on 127.0.0.1 only (127.0.0.2 and .3 refuse on its port) answering each GET
    with 200 "ok"; the list counts the connections it took."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[int] = []

    def serve() -> None:
        while True:
            try:
                peer, _ = listener.accept()
            except OSError:
                return
            taken.append(1)
            with peer:
                peer.recv(4096)
                peer.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    return listener, taken


def test_each_address_is_tried_in_turn_and_the_last_failure_is_raised():
    listener, taken = _answering_once_per_connection()
    port = listener.getsockname()[1]
    fetch = {
        "port": port,
        "host": "127.0.0.1",
        "path": "/",
        "secure": False,
        "headers": {},
        "max_bytes": 100,
    }
    try:
        answer = outbound.get_any(
            ips=["127.0.0.2", "127.0.0.1"], deadline=outbound.deadline_in(TIMEOUT), **fetch
        )
        assert (answer.status, answer.body, len(taken)) == (200, b"ok", 1)
        with pytest.raises(outbound.FetchFailed, match=r"127\.0\.0\.3"):
            outbound.get_any(
                ips=["127.0.0.2", "127.0.0.3"], deadline=outbound.deadline_in(TIMEOUT), **fetch
            )
        # Past the size limit, no other address is tried: the answer was there and too big.
        with pytest.raises(outbound.TooLarge):
            outbound.get_any(
                ips=["127.0.0.1", "127.0.0.1"],
                deadline=outbound.deadline_in(TIMEOUT),
                **{**fetch, "max_bytes": 1},
            )
        assert len(taken) == 2
        with pytest.raises(outbound.FetchFailed, match="has no address"):
            outbound.get_any(ips=[], deadline=outbound.deadline_in(TIMEOUT), **fetch)
    finally:
        listener.close()


def test_every_watchdog_of_a_process_runs_on_one_thread_and_fires_in_deadline_order():
    pairs = [socket.socketpair() for _ in range(3)]
    now = outbound.deadline_in(0)
    # Added latest-first: the thread must wake for the sooner deadline each time.
    dogs = [
        outbound.Watchdog(pairs[i][0], now + delay) for i, delay in ((0, 3.0), (1, 0.3), (2, 0.1))
    ]
    try:
        before = {t.name for t in threading.enumerate()}
        for dog in dogs:
            dog.__enter__()
        watchers = [t for t in threading.enumerate() if t.name == "outbound-watchdog"]
        assert len(watchers) == 1
        assert {t.name for t in threading.enumerate()} - before <= {"outbound-watchdog"}
        # A socket shut down by its watchdog reads end-of-stream instead of waiting.
        pairs[2][0].settimeout(5)
        assert pairs[2][0].recv(1) == b""
        assert dogs[2].fired and not dogs[0].fired
        pairs[0][0].settimeout(5)
        assert pairs[0][0].recv(1) == b""
        assert all(dog.fired for dog in dogs)
    finally:
        for dog in dogs:
            dog.__exit__(None, None, None)
        for a, b in pairs:
            a.close()
            b.close()


def test_a_watchdog_left_before_its_deadline_never_fires():
    a, b = socket.socketpair()
    try:
        with outbound.watchdog(a, outbound.deadline_in(0.2)) as dog:
            pass
        # A later one on the same thread fires: the first had its chance and was skipped.
        with outbound.watchdog(None, outbound.deadline_in(0.4)) as later:
            deadline = outbound.deadline_in(5)
            while not later.fired and outbound.deadline_in(0) < deadline:
                threading.Event().wait(0.05)
        assert later.fired and not dog.fired
        b.sendall(b"x")
        a.settimeout(1)
        assert a.recv(1) == b"x"  # not shut down
    finally:
        a.close()
        b.close()


def test_watchdogs_left_long_before_their_deadlines_do_not_pile_up():
    """A process that makes many calls with a long deadline: the entries of the finished ones
    are dropped once they are most of the heap, not kept until their deadlines pass."""
    for _ in range(10 * outbound._Alarms.COMPACT_AT):
        with outbound.watchdog(None, outbound.deadline_in(3600)):
            pass
    assert len(outbound._alarms) <= 2 * outbound._Alarms.COMPACT_AT


def test_a_forked_child_gets_a_watchdog_thread_of_its_own():
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its deadline fires although the parent's thread is not here
        try:
            os.close(read)
            c, d = socket.socketpair()
            with outbound.watchdog(c, outbound.deadline_in(0.1)):
                c.settimeout(5)
                ok = c.recv(1) == b""
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
