"""Chaos under load: the cluster on one machine (dev/cluster.py) behind HAProxy, with
concurrent agents over the API and MCP, while a driver injects one fault after another.

Everything the cluster runs on is the test's own, each on free loopback ports, so killing it
disturbs no other test. By default (wherever its engines are installed, `make deps`) no store
is a single node: PostgreSQL is a primary and a standby under pg_auto_failover, Redis (cache,
events) a primary, a replica and three sentinels, the broker three clustered RabbitMQ nodes
with quorum queues, or the Redis group itself; the processes find the primaries themselves
(dev/cluster.py). The local X DM API and Responses backend record every request.

The agents (threads in this process, through HAProxy): DM sends over the API, each retried
with its idempotency key after a retryable error and once more after success (the same action
must come back); operations submitted with their idempotency key; status polls; MCP tool calls
with the official SDK client (DM sends with their key, operation status reads).

The faults, in turn: SIGKILL one web, one MCP, one worker of each queue kind, the beat
holder; SIGKILL the Redis primary; SIGKILL the PostgreSQL primary; on RabbitMQ SIGKILL each
node in turn (the dm queue's leader first); cut web-1's broker connections (reset again and
again for at least CUT_SECONDS while DMs are sent straight to web-1: a publish must not hang
its request, so each is answered within PUBLISH_ANSWER_BOUND, accepted or 503 with
Retry-After; the slowest answer is printed). The cluster's supervisor restarts what was
killed; the time to recover is until every process serves again, HAProxy sees every server up
and a fresh DM sent through the balancer reached the provider. After each store fault the
killed node is started again and rejoins its group before the next fault (the table says how
long).

Afterwards: nothing accepted is lost and no DM reached the provider twice; every item is
terminal (or the documented waiting state `unknown`, only for sends a fault interrupted)
within the bound; clients saw only retryable errors (502, 503, 504, a reset or refused
connection, an answer cut off by a killed server), each followed by a success with the same
key; the billing invariants hold and /metrics agrees with the database. The table of the run is
printed to the terminal, passing or not.

PICNIC_CHAOS_FAILOVER=0 runs it on single nodes instead, a quicker run: a PostgreSQL, a Redis
with AOF and the broker (a second Redis with AOF, or one RabbitMQ node), with the restart
faults in place of the failover ones: restart Redis (SIGKILL, then start on its AOF), restart
the broker, restart PostgreSQL (fast shutdown). An engine that is not installed (HAProxy,
redis-server, RabbitMQ, pg_auto_failover) skips the test on a developer's machine, saying so,
and fails it in CI (PICNIC_REQUIRE_POSTGRES=1) or when PICNIC_CHAOS_FAILOVER=1 asked for the
failover mode: a skip must not pass for faults that never ran.
"""

from __future__ import annotations

import collections
import http.client
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from core.api import DATABASE_UNAVAILABLE
from dev import cluster as clusters
from dev import processes
from dev.testing import DM_ENDS, OPERATION_ENDS, LoadThreads
from mcp_adapter.event_store import INTERRUPTED
from mcp_adapter.sessions import EVENT_META_KEY
from picnic.brokers import publish_bound
from picnic.tests.chaos_world import PREFIX, System, world

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.chaos

WARM_SECONDS = 2  # load before the first fault
RECOVER_BOUND = 90  # each fault: back within this
DRAIN_SECONDS = 60  # every item terminal within this after the load stops
RETRY_FOR = 60  # a client retries one request this long at most
# Each agent pauses this long between its requests: load the dm workers keep up with between
# faults (two workers, one pool process each), so a fresh send after a fault is not behind a
# backlog that only grows (an overloaded queue, not a fault, would fail the recovery bound).
PACE_SECONDS = 0.3
NOTIFY_BOUND = 20  # the followed action changed: its update reaches the MCP session within this
# After these faults the followed action changes: the MCP session must hear of it and answer a
# tool call.
FOLLOW_AFTER = ("SIGKILL mcp-1", "restart Redis (AOF)", "restart PostgreSQL")


def chaos_mode(environ: Mapping[str, str]) -> tuple[bool, bool]:
    """Whether the run is in failover mode (no single node, the failover faults), and whether
    an engine that is not installed fails it. The failover mode is the default wherever its
    engines are installed (`make deps`); PICNIC_CHAOS_FAILOVER=0 runs the process faults on
    single nodes instead (a quicker run), =1 insists on the failover mode. CI
    (PICNIC_REQUIRE_POSTGRES=1), or a run that asked for the failover mode, fails on a missing
    engine: a skip there would look like a pass of faults that never ran."""
    setting = environ.get("PICNIC_CHAOS_FAILOVER", "")
    if setting not in ("", "0", "1"):
        raise pytest.UsageError(f"PICNIC_CHAOS_FAILOVER={setting!r}: 0, 1 or unset")
    return setting != "0", bool(environ.get("PICNIC_REQUIRE_POSTGRES")) or setting == "1"


FAILOVER, REQUIRE_ENGINES = chaos_mode(os.environ)
if FAILOVER:
    FOLLOW_AFTER = ("SIGKILL mcp-1", "SIGKILL the Redis primary", "SIGKILL the PostgreSQL primary")
REJOIN_BOUND = 240  # a killed store node is back in its group within this
# What a client may see from a lost instance or a restarting dependency, and retry.
RETRYABLE_STATUSES = {502, 503, 504}
RETRYABLE = {*RETRYABLE_STATUSES, "interrupted"}
RETRYABLE_ERRORS = (ConnectionError, http.client.HTTPException, TimeoutError, socket.timeout)
# "cut web-1's broker connections" (failover mode): for at least CUT_SECONDS web-1's broker
# connections are cut again and again while DMs are sent straight to web-1; each is answered
# within PUBLISH_ANSWER_BOUND: the publish's own bound (picnic.brokers.publish_bound, with the
# processes' default BROKER_TIMEOUT_SECONDS of 2 s) and what the request takes on this machine.
CUT_SECONDS = 5
PUBLISH_ANSWER_BOUND = publish_bound(2.0) + 5


def missing_engine(what: str) -> NoReturn:
    """A server the chaos test runs is not installed: skipped on a developer's machine (with
    PICNIC_CHAOS_FAILOVER=0 as the way to run without the failover engines), failed in CI."""
    if REQUIRE_ENGINES:
        pytest.fail(f"the chaos test needs {what} (make deps)", pytrace=False)
    quick = "; PICNIC_CHAOS_FAILOVER=0 runs the process faults on single nodes" if FAILOVER else ""
    pytest.skip(f"needs {what} (make deps){quick}")


@dataclass
class McpSeen:
    """What the MCP agent's session saw: how often it was opened (once, if it continued), the
    session ids its requests carried, the last HTTP status of a POST (whether an error is
    retryable), and the updates of the followed action, with when each arrived."""

    opened: int = 0
    session_ids: set[str] = field(default_factory=set)
    last_status: int | None = None
    updates: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, summary event)
    answered: list[float] = field(default_factory=list)  # when each tool call succeeded
    subscribed: threading.Event = field(default_factory=threading.Event)

    async def on_request(self, request) -> None:
        if session_id := request.headers.get("mcp-session-id"):
            self.session_ids.add(session_id)

    async def on_response(self, response) -> None:
        if response.request.method == "POST":
            self.last_status = response.status_code

    async def on_message(self, message) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            meta = message.params.meta or {}
            self.updates.append((time.monotonic(), str(meta.get(EVENT_META_KEY))))

    def continued_since(self, moment: float) -> bool:
        """Whether, since `moment`, the session heard of an update and answered a tool call."""
        return any(when > moment for when, _ in self.updates) and any(
            when > moment for when in self.answered
        )


class Unexpected(Exception):
    """An answer no client should get (a 500, a 4xx to a valid request)."""


@dataclass
class Tally:
    """What the clients saw: requests, errors by kind, retried requests and their outcome."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: collections.Counter = field(default_factory=collections.Counter)
    errors: collections.Counter = field(default_factory=collections.Counter)
    unexpected: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)

    def count(self, what: str, error: str | None = None) -> None:
        with self.lock:
            self.requests[what] += 1
            if error:
                self.errors[error] += 1


def error_kind(exc: BaseException) -> str | None:
    """The retryable kind of a failed request, or None."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, OSError):
        exc = exc.reason
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError | http.client.RemoteDisconnected):
        return "connection reset"
    if isinstance(exc, http.client.IncompleteRead):  # the instance died between head and body
        return "answer cut off"
    if isinstance(exc, RETRYABLE_ERRORS):
        return type(exc).__name__
    return None


class Agents(LoadThreads):
    """Concurrent clients through HAProxy until stopped; what was accepted is kept."""

    def __init__(self, system: System):
        super().__init__(pause=PACE_SECONDS, join_timeout=RETRY_FOR + 10)
        self.system = system
        self.tally = Tally()
        self.problems = self.tally.unexpected  # a failed loop is an unexpected answer
        self.deliveries: dict[str, str] = {}  # id -> text
        self.operations: set[str] = set()
        self.mcp = McpSeen()
        for one in (self._dm, self._dm, self._operation, self._poll):
            self.add(one)
        self.threads.append(threading.Thread(target=self._mcp, daemon=True))

    # --- one request, retried while its errors are retryable --------------------------

    def call(self, what: str, method: str, path: str, body: dict | None = None, key=None):
        headers = {"Idempotency-Key": key} if key else {}
        deadline = time.monotonic() + RETRY_FOR
        while True:
            try:
                status, _, raw = processes.http(
                    method,
                    self.system.cluster.web_url + path,
                    body=body,
                    token=self.system.api_token,
                    headers=headers,
                    timeout=30,
                )
            except (OSError, http.client.HTTPException) as exc:  # URLError, resets, cut off
                kind = error_kind(exc)
                if kind is None:
                    raise
                self.tally.count(what, kind)
            else:
                if status not in RETRYABLE_STATUSES:
                    self.tally.count(what)
                    if status >= 300:
                        raise Unexpected(f"{what}: {status} {raw[:300]!r}")
                    return status, json.loads(raw or b"{}")
                self.tally.count(what, str(status))
            if time.monotonic() > deadline:
                self.tally.gave_up.append(what)
                raise Unexpected(f"{what}: still failing after {RETRY_FOR}s")
            time.sleep(0.2)

    # --- the API agents ---------------------------------------------------------------

    def _dm(self) -> None:
        text = f"chaos {uuid.uuid4()}"
        key = str(uuid.uuid4())
        body = {**self.system.dm_target, "text": text, "idempotency_key": key}
        status, answer = self.call(
            "dm send", "POST", "/private-messaging-api/actions/send", body, key
        )
        delivery_id = answer["action"]["id"]
        with self.lock:
            self.deliveries[delivery_id] = text
        # A client that lost the answer sends again with its key: the same action comes back.
        status, again = self.call(
            "dm send", "POST", "/private-messaging-api/actions/send", body, key
        )
        if status != 200 or again["action"]["id"] != delivery_id:
            self.tally.unexpected.append(f"resend: {status} {again}")

    def _operation(self) -> None:
        key = str(uuid.uuid4())
        body = {
            "tool": "chaos",
            "category": "chaos",
            "input": f"chaos {key}",
            "idempotency_key": key,
        }
        _, answer = self.call("operation start", "POST", "/api/v1/operations", body, key)
        with self.lock:
            self.operations.add(answer["id"])

    def _poll(self) -> None:
        with self.lock:
            deliveries, operations = list(self.deliveries), list(self.operations)
        if deliveries:
            self.call(
                "status read",
                "POST",
                "/private-messaging-api/actions/status",
                {**self.system.dm_account, "action_id": deliveries[-1]},
            )
        if operations:
            self.call("status read", "GET", f"/api/v1/operations/{operations[-1]}")

    # --- the MCP agent: one 2025-11-25 session for the whole run, through HAProxy ----------

    def _mcp(self) -> None:
        anyio.run(self._mcp_session)

    async def _mcp_session(self) -> None:
        """One SDK client session: DM sends (retried with their key) and status reads as tool
        calls, and a subscription to the probe's action. Opened once; re-opened only if lost,
        which the test counts as a failure (`mcp.opened`)."""
        headers = {"Authorization": f"Bearer {self.system.mcp_token}"}
        hooks = {"request": [self.mcp.on_request], "response": [self.mcp.on_response]}
        while not self.stop.is_set():
            try:
                async with (
                    httpx2.AsyncClient(headers=headers, timeout=30, event_hooks=hooks) as http,
                    Client(
                        streamable_http_client(self.system.cluster.mcp_url, http_client=http),
                        mode="legacy",  # 2025-11-25: a session, shared by the instances
                        message_handler=self.mcp.on_message,
                    ) as client,
                ):
                    self.mcp.opened += 1
                    await self._mcp_retrying(client.subscribe_resource, self.system.followed_uri)
                    self.mcp.subscribed.set()
                    await self._mcp_load(client)
            except Exception as exc:  # noqa: BLE001 - a lost session is a finding
                while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
                    exc = exc.exceptions[0]
                self.tally.unexpected.append(f"MCP session lost: {type(exc).__name__}: {exc}")
                await anyio.sleep(0.2)

    async def _mcp_load(self, client: Client) -> None:
        pending: dict | None = None  # a send to retry with its key
        while not self.stop.is_set():
            if pending is None:
                text = f"chaos mcp {uuid.uuid4()}"
                pending = {
                    **self.system.dm_target,
                    "text": text,
                    "idempotency_key": str(uuid.uuid4()),
                }
            result = await self._mcp_retrying(client.call_tool, "sosoapi_dm_actions_send", pending)
            if result.is_error:  # the API behind the tool answered 502/503: the same key again
                await anyio.sleep(0.2)
                continue
            action = result.structured_content["action"]
            with self.lock:
                self.deliveries[action["id"]] = pending["text"]
            pending = None
            await self._mcp_retrying(
                client.call_tool,
                "sosoapi_dm_actions_status",
                {**self.system.dm_account, "action_id": action["id"]},
            )
            await anyio.sleep(PACE_SECONDS)

    async def _mcp_retrying(self, call, *args):
        """One MCP request, retried in the same session while its error is retryable: the
        HTTP answer was 502/503/504 (HAProxy's, or the server's when its store or database is
        away). Anything else (a 404 for the session, a 500) is unexpected and raised."""
        deadline = time.monotonic() + RETRY_FOR
        while True:
            self.mcp.last_status = None
            try:
                result = await call(*args)
            except MCPError as exc:
                status = self.mcp.last_status
                if exc.code == types.CONNECTION_CLOSED and exc.message == INTERRUPTED:
                    # Its instance died mid-request: the one that took the resumed stream
                    # says so (mcp_adapter/event_store.py); the same request again, same key.
                    status = "interrupted"
                if status not in RETRYABLE or time.monotonic() > deadline:
                    self.tally.count("mcp request", f"mcp {status}")
                    raise Unexpected(f"MCP answered {status}: {exc}") from exc
                self.tally.count("mcp request", str(status))
                await anyio.sleep(0.2)
                continue
            if hasattr(result, "is_error"):
                self.tool_result(result)
            else:
                self.tally.count("mcp request")
            return result

    def tool_result(self, result) -> None:
        """A tool call's outcome: an error result must be the API's retryable answer (the
        MCP server's note that the API answered 502/503 or was unreachable)."""
        if not result.is_error:
            self.mcp.answered.append(time.monotonic())
            return self.tally.count("mcp request")
        text = " ".join(c.text for c in result.content if hasattr(c, "text"))
        retryable = ("answered 502", "answered 503", "answered 504", "unreachable",
                     DATABASE_UNAVAILABLE)  # fmt: skip
        if not any(marker in text for marker in retryable):
            self.tally.unexpected.append(f"mcp tool error: {text[:300]}")
        self.tally.count("mcp request", "mcp tool error (API 502/503)")


# --- the system -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engines() -> None:
    """What every run needs installed (HAProxy, Redis; in failover mode pg_auto_failover too);
    RabbitMQ is checked by its run."""
    if not Path(clusters.HAPROXY).exists():
        missing_engine("Debian's haproxy")
    if shutil.which("redis-server") is None:
        missing_engine("redis-server")
    if FAILOVER and not clusters.FailoverPostgres.available():
        missing_engine("pg_auto_failover (pg-auto-failover-cli, postgresql-15-auto-failover)")


@pytest.fixture(scope="module")
def postgres(engines):
    """One private PostgreSQL for both brokers' runs (each gets a fresh database on it, copied
    from a template migrated once): what the two runs can share without sharing a fault. In
    failover mode, a primary and a standby under pg_auto_failover."""
    if FAILOVER:
        server = clusters.FailoverPostgres(
            Path(tempfile.mkdtemp(prefix="picnic-pg-ha-")), dbname="keeper"
        ).start()
    else:
        server = clusters.PostgresServer().start()
    yield server
    server.stop()
    if FAILOVER:
        shutil.rmtree(server.dir, ignore_errors=True)


class Booting:
    """A RabbitMQ cluster started on a thread: the failover mode's three nodes boot and join
    (about half a minute, mostly waiting on Erlang) while the Redis run sets up and runs,
    instead of before the RabbitMQ run."""

    def __init__(self, rabbits: clusters.RabbitCluster):
        self.rabbits = rabbits
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._boot, name="rabbit-boot", daemon=True)
        self.thread.start()

    def _boot(self) -> None:
        try:
            self.rabbits.start()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test that needs it
            self.error = exc

    def ready(self) -> clusters.RabbitCluster:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.rabbits

    def stop(self) -> None:
        self.thread.join()
        self.rabbits.stop()


@pytest.fixture(scope="module")
def rabbits(request, engines, tmp_path_factory):
    """The failover mode's RabbitMQ cluster, booting from the module's first test on when the
    RabbitMQ run is selected; None otherwise (the single-node mode starts its node in its
    world)."""
    amqp_selected = any(
        item.module is request.module and item.name.endswith("[amqp]")
        for item in request.session.items
    )
    if not (FAILOVER and amqp_selected and clusters.RABBITMQ_SERVER.exists()):
        yield None
        return
    booting = Booting(clusters.RabbitCluster(tmp_path_factory.mktemp("rabbits")))
    yield booting
    booting.stop()


@pytest.fixture(params=["redis", "amqp"])
def system(request, tmp_path, postgres, rabbits):
    if request.param == "amqp" and not clusters.RABBITMQ_SERVER.exists():
        missing_engine(f"RabbitMQ ({clusters.RABBITMQ_SERVER})")
    broker = rabbits.ready() if request.param == "amqp" and rabbits is not None else None
    with world(
        tmp_path, request.param, postgres=postgres, failover=FAILOVER, rabbits=broker
    ) as system:
        yield system


def kill_one_of_each_worker_kind(system: System) -> None:
    for kind in clusters.QUEUE_KINDS:
        system.cluster.kill(f"worker-{kind}-1")


FAULTS: list[tuple[str, Callable[[System], None]]] = [
    ("SIGKILL web-1", lambda s: s.cluster.kill("web-1")),
    ("SIGKILL mcp-1", lambda s: s.cluster.kill("mcp-1")),
    ("SIGKILL a worker of each kind", kill_one_of_each_worker_kind),
    ("SIGKILL the beat holder", lambda s: s.cluster.kill(s.cluster.beat_holder())),
    ("restart Redis (AOF)", lambda s: s.redis.restart()),
    ("restart the broker", lambda s: s.broker.restart()),
    ("restart PostgreSQL", lambda s: s.postgres.restart()),
]


# --- The failover faults (PICNIC_CHAOS_FAILOVER=1): each returns how to bring the killed node
# back, which the test does once the cluster serves again.


def kill_postgres_primary(s: System) -> Callable[[], None]:
    primary = s.postgres.primary()
    s.postgres.kill(primary)

    def rejoin() -> None:
        s.postgres.rejoin(primary)
        clusters.wait_for(
            lambda: sorted(s.postgres.states().values()) == ["primary", "secondary"],
            timeout=REJOIN_BOUND,
            what=f"{primary} back as the standby",
        )

    return rejoin


def kill_redis_primary(s: System) -> Callable[[], None]:
    node = s.redis.kill_primary()

    def rejoin() -> None:
        s.redis.rejoin(node)
        clusters.wait_for(lambda: s.redis.in_sync(node), timeout=REJOIN_BOUND, what="the replica")

    return rejoin


KILLED_RABBITS: set[str] = set()


def kill_rabbit_node(which: str) -> Callable[[System], Callable[[], None]]:
    """SIGKILL a RabbitMQ node: the dm queue's leader now, or one not killed yet (so that
    each node is killed once)."""

    def inject(s: System) -> Callable[[], None]:
        if which == "leader":
            leader = s.broker.queue_leaders(f"{PREFIX}dm")[f"{PREFIX}dm"]
            node = s.broker.node_named(leader)
        else:
            node = next(
                n for n in s.broker.nodes if n.env["RABBITMQ_NODENAME"] not in KILLED_RABBITS
            )
        KILLED_RABBITS.add(node.env["RABBITMQ_NODENAME"])
        s.broker.kill(node)
        return lambda: s.broker.rejoin(node)

    return inject


@dataclass
class PublishCut:
    """The fault "cut web-1's broker connections": from its start until at least CUT_SECONDS
    later (and until the cluster served again), every TCP connection web-1's processes hold to
    the broker's nodes, a publisher's pooled connection among them, is reset (`ss -K`) again
    and again, while a client sends DMs straight to web-1 (not through HAProxy, which could
    send them to web-2). A publish must not hang its request: each answer comes within
    PUBLISH_ANSWER_BOUND and is the send accepted (its publish reconnected, to another node if
    need be, or gave up and left the send to the beat's sweep) or a 503 with Retry-After (the
    client sends it again with its key)."""

    cuts: int = 0  # connections reset
    answers: list[tuple[float, str]] = field(default_factory=list)  # (seconds, status)
    deliveries: dict[str, str] = field(default_factory=dict)  # accepted id -> text
    problems: list[str] = field(default_factory=list)
    lasted: float = 0.0  # how long the connections were being cut
    stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> PublishCut:
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()  # also when the run failed before the fault was over

    def inject(self, s: System) -> Callable[[], None]:
        stop = self.stop
        started = time.monotonic()
        ports = {node.port for node in s.broker.nodes}
        url = f"http://127.0.0.1:{s.cluster.members['web-1'].port}"

        def cutting() -> None:
            while not stop.is_set():
                self.cuts += s.cluster.cut_connections("web-1", ports)
                stop.wait(0.2)

        def sending() -> None:
            while not stop.is_set():
                self.send(s, url)
                stop.wait(PACE_SECONDS)

        threads = [threading.Thread(target=run, daemon=True) for run in (cutting, sending)]
        for thread in threads:
            thread.start()

        def end() -> None:
            deadline = started + CUT_SECONDS + 2 * PUBLISH_ANSWER_BOUND
            while time.monotonic() < started + CUT_SECONDS or (
                len(self.answers) < 3 and time.monotonic() < deadline
            ):
                time.sleep(0.1)
            stop.set()
            for thread in threads:
                thread.join(timeout=PUBLISH_ANSWER_BOUND + 10)
            self.lasted = time.monotonic() - started

        return end

    def send(self, s: System, url: str) -> None:
        """One DM to web-1, sent again with its key after a 503 with Retry-After."""
        text = f"chaos cut {uuid.uuid4()}"
        key = str(uuid.uuid4())
        body = {**s.dm_target, "text": text, "idempotency_key": key}
        deadline = time.monotonic() + RETRY_FOR
        while True:
            started = time.monotonic()
            try:
                status, headers, raw = processes.http(
                    "POST",
                    f"{url}/private-messaging-api/actions/send",
                    body=body,
                    token=s.api_token,
                    headers={"Idempotency-Key": key},
                    timeout=PUBLISH_ANSWER_BOUND + 5,
                )
            except (OSError, http.client.HTTPException) as exc:  # a hang ends as a timeout
                took = time.monotonic() - started
                self.answers.append((took, type(exc).__name__))
                self.problems.append(f"web-1 gave no answer ({took:.1f} s): {exc!r}")
                return
            took = time.monotonic() - started
            self.answers.append((took, str(status)))
            if took > PUBLISH_ANSWER_BOUND:
                self.problems.append(f"web-1 answered {status} after {took:.1f} s")
            retry_after = {k.lower(): v for k, v in headers.items()}.get("retry-after")
            if status in (200, 202):
                self.deliveries[json.loads(raw)["action"]["id"]] = text
                return
            if status != 503 or not retry_after:
                self.problems.append(f"web-1 answered {status} {retry_after=} {raw[:200]!r}")
                return
            if time.monotonic() > deadline:
                self.problems.append(f"web-1 still answered 503 after {RETRY_FOR}s")
                return
            time.sleep(min(float(retry_after), 1.0))

    def worst(self) -> float:
        return max((took for took, _ in self.answers), default=0.0)


PROCESS_FAULTS = FAULTS[:4]


def failover_faults(broker_kind: str, cut: PublishCut) -> list[tuple[str, Callable]]:
    """The faults of the failover mode, on the Redis group as the broker or on RabbitMQ."""
    faults = [
        *PROCESS_FAULTS,
        ("SIGKILL the Redis primary", kill_redis_primary),
        ("SIGKILL the PostgreSQL primary", kill_postgres_primary),
    ]
    if broker_kind == "amqp":
        faults += [
            ("SIGKILL the dm queue leader's node", kill_rabbit_node("leader")),
            ("SIGKILL a second RabbitMQ node", kill_rabbit_node("next")),
            ("SIGKILL the third RabbitMQ node", kill_rabbit_node("next")),
        ]
    return [*faults, ("cut web-1's broker connections", cut.inject)]


def test_chaos_faults_under_load_nothing_lost_nothing_sent_twice(system, caplog, capsys):
    caplog.set_level(logging.WARNING, logger="httpx2")  # a line per MCP request otherwise
    caplog.set_level(logging.WARNING, logger="mcp.client.streamable_http")
    recovered: dict[str, float] = {}
    rejoined: dict[str, float] = {}  # failover mode: the killed node back in its group
    followed: dict[str, bool] = {}  # fault -> the subscription made before it delivered after
    cut = PublishCut()
    faults = failover_faults(system.broker_kind, cut) if FAILOVER else FAULTS
    with Agents(system) as agents, cut:
        assert agents.mcp.subscribed.wait(RETRY_FOR), "the MCP agent never subscribed"
        time.sleep(WARM_SECONDS)
        for name, inject in faults:
            holder = system.cluster.beat_holder()
            started = time.monotonic()
            rejoin = inject(system)
            time.sleep(0.5)  # let the fault be seen before asking whether it is over
            deadline = started + RECOVER_BOUND
            while not (system.serving() and system.fresh_dm_sent()):
                assert time.monotonic() < deadline, (
                    f"{name}: not recovered in {RECOVER_BOUND}s: {system.state()}"
                )
                time.sleep(0.2)
            recovered[name] = time.monotonic() - started
            if name == "SIGKILL the beat holder":
                assert system.cluster.beat_holder() != holder  # the standby took over
            if name in FOLLOW_AFTER:
                followed[name] = session_continues(system, agents, name)
            if callable(rejoin):
                started = time.monotonic()
                rejoin()
                rejoined[name] = time.monotonic() - started
    accepted = {**agents.deliveries, **cut.deliveries}

    def settled() -> dict | None:
        report = system.probe("check")
        ends = [d["status"] in DM_ENDS for d in report["deliveries"].values()]
        ends += [o["state"] in OPERATION_ENDS for o in report["operations"].values()]
        return report if all(ends) else None

    deadline = time.monotonic() + DRAIN_SECONDS
    while not (report := settled()):
        assert time.monotonic() < deadline, "not every item ended within the bound"
        time.sleep(1)

    deliveries, operations = report["deliveries"], report["operations"]
    statuses = collections.Counter(d["status"] for d in deliveries.values())
    receipts = collections.Counter(r["text"] for r in system.x_api.requests)
    lost = [i for i in accepted if i not in deliveries]
    lost += [i for i in agents.operations if i not in operations]
    duplicates = sum(n - 1 for n in receipts.values() if n > 1)
    duplicates += len(system.backend.responses) - len(system.backend.by_key)
    with capsys.disabled():  # to the terminal: CI's output shows the table of a passing run too
        print_table(system, recovered, followed, agents, lost, duplicates, statuses, operations)
        if FAILOVER:
            print_failover(rejoined, cut)

    assert agents.tally.unexpected == [], agents.tally.unexpected[:10]
    if FAILOVER:
        # Requests to web-1 while its broker connections were being cut: each answered in time
        # (accepted, or 503 with Retry-After), none hung.
        assert cut.problems == [], cut.problems[:10]
        assert cut.cuts > 0 and len(cut.answers) >= 3, (cut.cuts, cut.answers)
        assert cut.worst() <= PUBLISH_ANSWER_BOUND, cut.answers
    # MCP: one session for the whole run, which went on on the other instance when mcp-1 died
    # (and through every other fault); after each fault it was checked after, its
    # subscription, made before the faults, delivered, and a tool call was answered.
    assert agents.mcp.opened == 1, agents.mcp.opened
    assert len(agents.mcp.session_ids) == 1, agents.mcp.session_ids
    assert followed == dict.fromkeys(FOLLOW_AFTER, True), followed
    assert agents.tally.gave_up == []
    assert sum(agents.tally.requests.values()) > 50
    assert len(accepted) > 10 and len(agents.operations) > 3
    # Nothing lost, nothing twice.
    assert lost == []
    assert duplicates == 0, [t for t, n in receipts.items() if n > 1]
    for delivery_id, text in accepted.items():
        expected = {1} if deliveries[delivery_id]["status"] == "sent" else {0, 1}
        assert receipts[text] in expected, (deliveries[delivery_id], receipts[text])
        history = deliveries[delivery_id]["history"]
        assert history[0] == "queued" and history[-1] == deliveries[delivery_id]["status"]
    # Only sends a fault interrupted may wait as `unknown` for staff; none failed.
    assert set(statuses) <= {"sent", "unknown"}, statuses
    assert statuses["unknown"] <= len(recovered), statuses
    # Operations: every one ended, one backend response each, the books balance.
    assert {o["state"] for o in operations.values()} <= OPERATION_ENDS
    assert set(system.backend.by_key) >= set(agents.operations)
    assert all(o["invariants"] == [] for o in operations.values()), operations
    assert report["wallet_invariants"] == []
    # The metrics of every process (killed ones included) agree with the database, except for
    # an outcome a kill interrupted between its commit and its count.
    scraped = system.metrics()
    kills = 1 + 1  # the dm worker killed with its kind, and the web/beat around it cannot count
    counted = scraped.get(("picnic_dm_outcomes_total", (("outcome", "sent"),)), 0)
    assert statuses["sent"] - kills <= counted <= statuses["sent"], (counted, statuses)
    succeeded = sum(o["state"] == "succeeded" for o in operations.values())
    counted = scraped.get(
        (
            "picnic_lifecycle_transitions_total",
            (("lifecycle", "operation"), ("status", "succeeded")),
        ),
        0,
    )
    assert succeeded - kills <= counted <= succeeded, (counted, succeeded)


def session_continues(system: System, agents: Agents, fault: str) -> bool:
    """The action the MCP session subscribed to before the faults changes now: whether the
    session (on whichever instance holds its stream now) hears of it, and answers a tool call,
    within the bound."""
    changed_at = time.monotonic()
    system.probe("touch", {"action_id": system.action_id, "summary": f"after {fault}"})
    deadline = time.monotonic() + NOTIFY_BOUND
    while time.monotonic() < deadline:
        if agents.mcp.continued_since(changed_at):
            return True
        time.sleep(0.1)
    return False


def print_table(
    system, recovered, followed, agents, lost, duplicates, statuses, operations
) -> None:
    tally = agents.tally
    lines = ["", f"chaos under load ({system.broker_kind} broker): fault      recovered in"]
    lines += [f"  {name:<44} {seconds:6.1f} s" for name, seconds in recovered.items()]
    lines.append(f"faults injected: {len(recovered)}")
    lines.append("requests: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.requests.items())))
    lines.append(
        "errors by kind: "
        + (", ".join(f"{k} {v}" for k, v in sorted(tally.errors.items())) or "none")
    )
    lines.append(f"DMs: {dict(statuses)}; operations: {len(operations)}")
    lines.append(f"items lost: {len(lost)}; duplicates: {duplicates}")
    mcp = agents.mcp
    lines.append(
        f"MCP: sessions opened {mcp.opened}, session ids used {len(mcp.session_ids)}, "
        f"tool calls answered {len(mcp.answered)}, updates of the followed action "
        f"{len(mcp.updates)}; update heard and a call answered after: "
        + ", ".join(f"{fault} {'yes' if ok else 'NO'}" for fault, ok in followed.items())
    )
    print("\n".join(lines))


def print_failover(rejoined: dict[str, float], cut: PublishCut) -> None:
    lines = ["failover: the killed node back in its group (standby), or the cut over, in"]
    lines += [f"  {name:<44} {seconds:6.1f} s" for name, seconds in rejoined.items()]
    statuses = collections.Counter(status for _, status in cut.answers)
    lines.append(
        f"web-1 while its broker connections were cut ({cut.cuts} connections over "
        f"{cut.lasted:.1f} s): {len(cut.answers)} sends answered "
        f"({', '.join(f'{k} {v}' for k, v in sorted(statuses.items())) or 'none'}), "
        f"the slowest in {cut.worst():.2f} s (bound {PUBLISH_ANSWER_BOUND:.1f} s)"
    )
    print("\n".join(lines))
