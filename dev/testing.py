"""A scriptable local JSON-RPC/HTTP server for fault-injection tests.

It speaks plain HTTP on 127.0.0.1 and, per request, answers as told: a JSON-RPC result, a
JSON-RPC error, an HTTP 5xx, bytes that are not JSON, a response that never comes (hang), or
a connection dropped after the request was read. Used by every adapter's tests.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client.parser import text_string_to_metric_families

from core.admin import HISTORY_INLINE_LIMIT
from core.models import ActorKind
from dev.local_server import LocalJsonServer


class RpcError(Exception):
    """Raised by a ScriptedServer handler: answer this JSON-RPC error."""

    def __init__(self, code: int, message: str):
        self.code, self.message = code, message
        super().__init__(message)


class ScriptedServer(LocalJsonServer):
    def __init__(self) -> None:
        super().__init__()
        self.mode = "result"
        self.result: Any = None
        # Per-method results (e.g. the chain's eth_call beside the bundler's methods).
        self.results: dict[str, Any] = {}
        self.errors: dict[str, dict[str, Any]] = {}  # per-method JSON-RPC errors
        self.error: dict[str, Any] = {"code": -32000, "message": "scripted error"}
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each request's HTTP headers, in order
        self.handler: Callable[[dict[str, Any]], Any] | None = None

    def on_post(self, handler) -> None:
        body = self.read_body(handler)
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {"raw": body.decode(errors="replace")}
        self.requests.append(request)
        self.headers.append(dict(handler.headers))
        rpc_id = request.get("id") if isinstance(request, dict) else None
        if self.mode == "hang":
            return self.hang()
        if self.mode == "drop":
            return self.drop(handler)
        if self.mode == "http500":
            return self.send(handler, 500, b'{"message": "internal error"}')
        if self.mode == "garbage":
            return self.send(handler, 200, b"<html>502 Bad Gateway</html>")
        if self.mode == "drip":  # a whole answer, one byte a second
            answer = {"jsonrpc": "2.0", "id": rpc_id, "result": self.result}
            return self.drip_answer(handler, "application/json", json.dumps(answer).encode())
        if self.mode == "rpc_error":
            return self.send_json(
                handler, 200, {"jsonrpc": "2.0", "id": rpc_id, "error": self.error}
            )
        method = request.get("method") if isinstance(request, dict) else None
        try:
            if self.handler:
                result = self.handler(request)
            elif method in self.errors:
                raise RpcError(self.errors[method]["code"], self.errors[method]["message"])
            else:
                result = self.results.get(method, self.result)
        except RpcError as exc:
            error = {"code": exc.code, "message": exc.message}
            return self.send_json(handler, 200, {"jsonrpc": "2.0", "id": rpc_id, "error": error})
        return self.send_json(handler, 200, {"jsonrpc": "2.0", "id": rpc_id, "result": result})


class OtlpReceiver(LocalJsonServer):
    """A local OTLP/HTTP trace collector: decodes each `ExportTraceServiceRequest` (protobuf)
    posted to /v1/traces and keeps its spans, as dicts with hex ids and the service name."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[dict[str, Any]] = []

    @property
    def endpoint(self) -> str:
        """What OTEL_EXPORTER_OTLP_ENDPOINT is set to (the exporter adds /v1/traces)."""
        return self.url

    def on_post(self, handler) -> None:
        body = self.read_body(handler)
        if handler.path != "/v1/traces":
            return self.send(handler, 404, b"")
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        {
                            "service": attributes.get("service.name", ""),
                            "scope": scope_spans.scope.name,
                            "name": span.name,
                            "kind": span.kind,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                        }
                    )
        self.send(handler, 200, ExportTraceServiceResponse().SerializeToString())

    def in_trace(self, trace_id: str) -> list[dict[str, Any]]:
        return [s for s in list(self.spans) if s["trace_id"] == trace_id]


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

    db = connection.settings_dict
    if connection.vendor == "postgresql":
        user = db["USER"] or "postgres"
        return f"postgres://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


# A solo worker runs each task inside its event loop, so even an at-most-once task's ack leaves
# only once the task returned: with one message prefetched, the broker sends the next only after
# that ack's round trip (on RabbitMQ through the quorum queue's Raft log, 150-400 ms on a loaded
# machine, which halved a dm worker's rate). Two prefetched keep one waiting. The concurrency is
# named because Celery sizes the prefetch from it at start (default: the CPU count) but from the
# pool's one process after a reconnect: unnamed, a broker restart cut the prefetch from 2 to 1.
SOLO_PREFETCH = ["--concurrency=1", "--prefetch-multiplier=2"]


def celery_worker_argv(queues: list[str], *, concurrency: int | None = None) -> list[str]:
    """The one `celery worker` command line (dev.processes starts it too): this project's
    app on `queues`, a prefork pool of `concurrency` processes (the production process type)
    or, without it, the solo pool in one process (a test kills exactly what it started)."""
    if concurrency:
        pool = ["--concurrency", str(concurrency)]
    else:  # one process, alone on its queue: no other worker to send heartbeats to
        pool = ["--pool=solo", *SOLO_PREFETCH, "--without-heartbeat"]
    return [
        sys.executable, "-m", "celery", "-A", "picnic", "worker", "-Q", ",".join(queues),
        *pool, "--without-gossip", "--without-mingle", "-l", "info",
    ]  # fmt: skip


def process_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a server process a test starts (web, worker, beat): this one's, on
    the test database and the test's broker, with `env` on top."""
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        **(env or {}),
    }


def start_celery_worker(*, queue: str, log_path, env: dict[str, str] | None = None):
    """A real `celery worker` process on `queue`, sharing the test database and broker."""

    environ = process_env(env)
    log = open(log_path, "w")  # noqa: SIM115 - closed by the caller via proc.log
    proc = subprocess.Popen(
        celery_worker_argv([queue]),
        cwd=Path(settings.BASE_DIR),
        env=environ,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    proc.log = log
    return proc


def stop_celery_worker(proc, *, grace: float = 2.0) -> None:
    """Stop a worker `start_celery_worker` started, and close its log: SIGTERM, then SIGKILL
    if it is still there after `grace` seconds. A solo worker acts on a signal only once its
    event loop's poll returns, up to 10 s later on RabbitMQ (docs/deploy.md, "RabbitMQ"), and
    a test's worker has nothing left to finish."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    proc.log.close()


def history_statuses(entity) -> list[str]:
    """The statuses an action, delivery or operation went through, oldest first."""
    return list(entity.history.order_by("timestamp", "id").values_list("status", flat=True))


# Browser tests drive Debian's Chromium (never a downloaded build), headless as root in a
# container: no sandbox, no GPU, nothing fetched in the background.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_options() -> dict[str, Any]:
    """Playwright's `chromium.launch(**chromium_options())`; a missing browser fails the test
    with the command that installs it (never a skip)."""

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    return {"executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


def add_virtual_authenticator(cdp) -> None:
    """A CDP virtual platform authenticator (passkeys) that verifies the user and answers at once."""
    cdp.send("WebAuthn.enable")
    cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )


# --- The admin at scale (each app's test_admin_scale) ------------------------------------------


def admin_page_queries(client, url: str) -> int:
    """The queries a page costs once warm (session, permissions, caches)."""
    client.get(url)
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def assert_queries_do_not_grow(client, url: str, grow: Callable[[], Any]) -> str:
    """The page costs as many queries after `grow()` (more rows, a longer history) as before;
    its text after."""
    few = admin_page_queries(client, url)
    grow()
    with CaptureQueriesContext(connection) as captured:
        page = client.get(url)
    queries = [q["sql"] for q in captured]
    assert len(queries) == few, f"{len(queries)} queries, not {few}: " + "\n".join(queries)
    return page.text


def assert_change_page_bounds_history(
    client, changelist_url: str, entity, *, staff_user, extra: int = 5
) -> str:
    """With `HISTORY_INLINE_LIMIT + extra` staff notes, `entity`'s admin change page costs as
    many queries as before them and shows the latest notes, not the first; its text."""
    count = HISTORY_INLINE_LIMIT + extra
    text = assert_queries_do_not_grow(
        client,
        f"{changelist_url}{entity.pk}/change/",
        lambda: add_staff_notes(entity, staff_user=staff_user, count=count),
    )
    assert f"staff note {count - 1}<" in text
    assert "staff note 0<" not in text
    return text


def plan_nodes(sql: str, params=None, *, sorts: bool = False) -> list[dict[str, Any]]:
    """Every node of PostgreSQL's plan for `sql`, with sequential scans (and, unless `sorts`,
    sorts) disabled: on a test's few rows any plan is cheap, so this shows whether an index
    serves the statement (its WHERE and its order), and a missing one as a scan or a sort that
    had to stay."""
    disabled = ["enable_seqscan"] if sorts else ["enable_seqscan", "enable_sort"]
    with connection.cursor() as cursor:
        for setting in disabled:
            cursor.execute(f"SET {setting} = off")
        try:
            cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
        finally:
            for setting in disabled:
                cursor.execute(f"SET {setting} = on")
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes, stack = [], [plan[0]["Plan"]]
    while stack:
        nodes.append(stack.pop())
        stack.extend(nodes[-1].get("Plans", []))
    return nodes


def assert_reads_in_order_from(sql: str, table: str, index: str) -> None:
    """`sql` reads `table` from `index` alone, in the order it asks for: no sort, no other
    scan of the table (PostgreSQL)."""
    nodes = plan_nodes(sql)
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], nodes
    scans = [n for n in nodes if n.get("Relation Name") == table]
    assert [n.get("Index Name") for n in scans] == [index], nodes


def admin_search(client, url: str, term: str) -> str:
    """The changelist searched for `term`; fails if a query compares by substring, case-folded
    or cast (each would miss the index). The users' e-mail is compared ignoring case: users are
    few, and no index of ours."""
    with CaptureQueriesContext(connection) as captured:
        page = client.get(url, {"q": term})
    assert page.status_code == 200
    for sql in (q["sql"] for q in captured):
        if 'FROM "auth_user"' in sql:
            continue
        assert " LIKE " not in sql and "UPPER(" not in sql and "::text" not in sql, sql
    return page.text


def add_staff_notes(entity, *, staff_user, count: int) -> None:
    """`count` history rows on `entity` by `staff_user`, "staff note 0" onwards, its status
    unchanged: a long history for the change page to bound."""
    lifecycle = entity.lifecycle
    status = getattr(entity, lifecycle.status_field)
    for n in range(count):
        lifecycle.history_model.objects.create(
            **{lifecycle.history_fk: entity},
            from_status=status,
            status=status,
            detail=f"staff note {n}",
            actor_kind=ActorKind.STAFF,
            actor_user=staff_user,
        )


# --- Load tests (picnic/tests/test_soak.py, test_chaos.py): what both set up and run ---------

# The documented end states: terminal, or `unknown` (a DM whose fate only staff can tell).
DM_ENDS = frozenset({"sent", "failed", "cancelled", "unknown"})
OPERATION_ENDS = frozenset({"succeeded", "failed", "cancelled"})


def load_test_env(
    workdir: Path,
    *,
    x_api_url: str,
    x_token_env: str,
    x_token: str,
    backend_url: str,
    backend_key: str,
    metrics_token: str,
) -> dict[str, str]:
    """The environment of a load test's production processes (DEBUG off, the APIs only, no
    collectstatic), on the local X DM API and Responses backend with short timeouts, leases
    and backoffs, every process writing its metrics under `workdir`/prometheus (one scrape
    sums them). The caller adds its database, broker, cache, events and chain."""
    (workdir / "prometheus").mkdir(exist_ok=True)
    return {
        **os.environ,
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "SPEND_PERMISSION_KEYS": Fernet.generate_key().decode(),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_STATIC_MANIFEST": "false",  # the APIs only: no collectstatic needed
        "PICNIC_VAR_DIR": str(workdir / "var"),
        "X_API_BASE_URL": x_api_url,
        x_token_env: x_token,
        "DM_PROVIDER_TIMEOUT_SECONDS": "3",
        "DM_LEASE_SECONDS": "6",
        "DM_RETRY_BACKOFF_SECONDS": "1",
        "OPERATIONS_BACKEND_URL": backend_url,
        "OPERATIONS_BACKEND_API_KEY": backend_key,
        "OPERATIONS_BACKEND_TIMEOUT_SECONDS": "3",
        "OPERATIONS_POLL_SECONDS": "1",
        "PROMETHEUS_MULTIPROC_DIR": str(workdir / "prometheus"),
        "METRICS_TOKEN": metrics_token,
    }


def scrape_metrics(base_url: str, token: str) -> dict[tuple[str, tuple], float]:
    """One scrape of `base_url`/metrics: {(sample name, sorted labels): value}."""
    request = urllib.request.Request(f"{base_url}/metrics")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


class LoadThreads:
    """Concurrent clients, each a thread running one request function in a loop (pausing
    `pause` seconds between runs) until stopped; a failure is kept in `problems`, never
    raised. Subclasses add their loops with `add(one)`; `with` starts and stops them."""

    def __init__(self, *, pause: float = 0.1, join_timeout: float = 60):
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.problems: list[str] = []
        self.threads: list[threading.Thread] = []
        self.pause, self.join_timeout = pause, join_timeout

    def add(self, one: Callable[[], None]) -> None:
        self.threads.append(threading.Thread(target=self._loop, args=(one,), daemon=True))

    def _loop(self, one: Callable[[], None]) -> None:
        while not self.stop.is_set():
            try:
                one()
            except Exception as exc:  # noqa: BLE001 - every failure is a finding, not a crash
                self.problems.append(f"{type(exc).__name__}: {exc}")
            time.sleep(self.pause)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=self.join_timeout)


class TcpCut:
    """A TCP proxy on a free loopback port in front of a real server (a broker) whose path can
    be cut the way a frozen node or a network that drops packets cuts it: no reset, no refusal,
    nothing answered. While `cut()`, every connection stays open but nothing crosses it (what
    either side sends is held back), and no new connection is served (the kernel completes a
    handshake or two into the listen backlog, later connects time out). After `heal()` new and
    idle connections work again; one that had bytes held back is closed, as a connection that
    outlived a partition would be by its peer. `with` closes everything."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=1)
        self.port = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    def _accept(self) -> None:
        while True:
            self._open.wait()
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self._open.is_set():
                    self._open.wait()  # held back until the cut heals, then never delivered
                    break
                dst.sendall(data)
            else:
                self._open.wait()  # an end (FIN) crosses no cut either
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._open.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def __enter__(self) -> TcpCut:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
