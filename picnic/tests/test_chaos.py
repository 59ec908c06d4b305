"""Chaos under load: the cluster on one machine (picnic/cluster.py) behind HAProxy, with
concurrent agents over the API and MCP, while a driver injects one fault after another.

Everything the cluster runs on is the test's own: a PostgreSQL initdb'ed into a temporary
directory, a Redis with AOF (cache, events), the broker (a second Redis with AOF; RabbitMQ with
quorum queues when the broker supports it), each on a free loopback port, so restarting them
disturbs no other test. The local X DM API and Responses backend record every request.

The agents (threads in this process, through HAProxy): DM sends over the API, each retried
with its idempotency key after a retryable error and once more after success (the same action
must come back); operations submitted with their idempotency key; status polls; MCP tool calls
with the official SDK client (DM sends with their key, operation status reads).

The faults, in turn: SIGKILL one web, one MCP, one worker of each queue kind, the beat
holder; restart Redis (SIGKILL, then start on its AOF); restart the broker; restart PostgreSQL
(fast shutdown). The cluster's supervisor restarts what was killed; the time to recover is
until every process serves again, HAProxy sees every server up and a fresh DM sent through
the balancer reached the provider.

Afterwards: nothing accepted is lost and no DM reached the provider twice; every item is
terminal (or the documented waiting state `unknown`, only for sends a fault interrupted)
within the bound; clients saw only retryable errors (502, 503, 504, a reset or refused
connection), each followed by a success with the same key; the billing invariants hold and
/metrics agrees with the database. The table of the run is printed.
"""

from __future__ import annotations

import collections
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.error
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from core.api import DATABASE_UNAVAILABLE
from picnic import cluster as clusters
from picnic import processes
from picnic.tests.chaos_world import RabbitVhost, System, world

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.chaos,
    pytest.mark.skipif(
        not Path(clusters.HAPROXY).exists(), reason="needs Debian's haproxy (make deps)"
    ),
]

WARM_SECONDS = 3  # load before the first fault
RECOVER_BOUND = 90  # each fault: back within this
DRAIN_SECONDS = 60  # every item terminal within this after the load stops
RETRY_FOR = 60  # a client retries one request this long at most
DM_ENDS = {"sent", "failed", "cancelled", "unknown"}
OPERATION_ENDS = {"succeeded", "failed", "cancelled"}
# What a client may see from a lost instance or a restarting dependency, and retry.
RETRYABLE_STATUSES = {502, 503, 504}
RETRYABLE_ERRORS = (ConnectionError, http.client.HTTPException, TimeoutError, socket.timeout)


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
    if isinstance(exc, RETRYABLE_ERRORS):
        return type(exc).__name__
    return None


class Agents:
    """Concurrent clients through HAProxy until stopped; what was accepted is kept."""

    def __init__(self, system: System):
        self.system = system
        self.tally = Tally()
        self.stop = threading.Event()
        self.deliveries: dict[str, str] = {}  # id -> text
        self.operations: set[str] = set()
        self.mcp_sessions = 0
        self.mcp_failures: list[str] = []
        self.lock = threading.Lock()
        loops = [self._dm, self._dm, self._operation, self._poll]
        self.threads = [threading.Thread(target=self._loop, args=(f,), daemon=True) for f in loops]
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
            except OSError as exc:  # URLError, resets, timeouts
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

    def _loop(self, one: Callable[[], None]) -> None:
        while not self.stop.is_set():
            try:
                one()
            except Exception as exc:  # noqa: BLE001 - every failure is a finding, not a crash
                self.tally.unexpected.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.1)

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

    # --- the MCP agent: one SDK client, DM sends and status reads as tool calls ----------

    def _mcp(self) -> None:
        anyio.run(self._mcp_session)

    async def _mcp_session(self) -> None:
        headers = {"Authorization": f"Bearer {self.system.mcp_token}"}
        pending: dict | None = None  # a send to retry with its key in the next session
        while not self.stop.is_set():
            try:
                async with (
                    httpx2.AsyncClient(headers=headers, timeout=30) as http_client,
                    Client(
                        streamable_http_client(self.system.cluster.mcp_url, http_client=http_client)
                    ) as client,
                ):
                    self.mcp_sessions += 1
                    while not self.stop.is_set():
                        if pending is None:
                            text = f"chaos mcp {uuid.uuid4()}"
                            pending = {
                                **self.system.dm_target,
                                "text": text,
                                "idempotency_key": str(uuid.uuid4()),
                            }
                        result = await client.call_tool("sosoapi_dm_actions_send", pending)
                        self.tool_result(result)
                        if result.is_error:
                            # The API behind the tool answered 502/503 (or was unreachable):
                            # the same key again.
                            await anyio.sleep(0.2)
                            continue
                        action = result.structured_content["action"]
                        with self.lock:
                            self.deliveries[action["id"]] = pending["text"]
                        pending = None
                        read = await client.call_tool(
                            "sosoapi_dm_actions_status",
                            {**self.system.dm_account, "action_id": action["id"]},
                        )
                        self.tool_result(read)
                        await anyio.sleep(0.1)
            except Exception as exc:  # noqa: BLE001 - a lost session is counted, then reopened
                while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
                    exc = exc.exceptions[0]
                kind = error_kind(exc) or f"mcp {type(exc).__name__}"
                self.mcp_failures.append(f"{type(exc).__name__}: {exc}"[:300])
                self.tally.count("mcp tool call", kind)
                await anyio.sleep(0.2)

    def tool_result(self, result) -> None:
        """A tool call's outcome: an error result must be the API's retryable answer (the
        MCP server's note that the API answered 502/503 or was unreachable)."""
        if not result.is_error:
            return self.tally.count("mcp tool call")
        text = " ".join(c.text for c in result.content if hasattr(c, "text"))
        retryable = ("answered 502", "answered 503", "answered 504", "unreachable",
                     DATABASE_UNAVAILABLE)  # fmt: skip
        if not any(marker in text for marker in retryable):
            self.tally.unexpected.append(f"mcp tool error: {text[:300]}")
        self.tally.count("mcp tool call", "mcp tool error (API 502/503)")

    def __enter__(self) -> Agents:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=RETRY_FOR + 10)


# --- the system -------------------------------------------------------------------------------


@pytest.fixture(
    params=[
        "redis",
        # Opt-in until an open defect is understood: on RabbitMQ a fresh DM was once not
        # delivered within the recovery bound after the MCP kill although every process
        # served; an expected failure would be a test that cannot fail, so it runs on request.
        pytest.param(
            "amqp",
            marks=pytest.mark.skipif(
                os.environ.get("PICNIC_CHAOS_AMQP") != "1",
                reason="the RabbitMQ chaos run is opt-in (PICNIC_CHAOS_AMQP=1): an open "
                "defect, a DM once not delivered within the bound after the MCP kill",
            ),
        ),
    ]
)
def system(request, tmp_path):
    with world(tmp_path, request.param) as system:
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


def test_chaos_faults_under_load_nothing_lost_nothing_sent_twice(system, caplog):
    caplog.set_level(logging.WARNING, logger="httpx2")  # a line per MCP request otherwise
    recovered: dict[str, float] = {}
    with Agents(system) as agents:
        time.sleep(WARM_SECONDS)
        for name, inject in FAULTS:
            if name == "restart the broker" and isinstance(system.broker, RabbitVhost):
                # Cutting the vhost's connections leaves the web's publishes with confirms
                # hanging (celery/celery#9259: kombu's producer waits for a confirm on a
                # closed connection); until that is fixed the fault is left out on RabbitMQ.
                continue
            holder = system.cluster.beat_holder()
            started = time.monotonic()
            inject(system)
            time.sleep(1)  # let the fault be seen before asking whether it is over
            deadline = started + RECOVER_BOUND
            while not (system.serving() and system.fresh_dm_sent()):
                assert time.monotonic() < deadline, (
                    f"{name}: not recovered in {RECOVER_BOUND}s: {system.state()}"
                )
                time.sleep(0.2)
            recovered[name] = time.monotonic() - started
            if name == "SIGKILL the beat holder":
                assert system.cluster.beat_holder() != holder  # the standby took over
    accepted = dict(agents.deliveries)

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
    print_table(recovered, agents, lost, duplicates, statuses, operations)

    assert agents.tally.unexpected == [], agents.tally.unexpected[:10]
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


def print_table(recovered, agents, lost, duplicates, statuses, operations) -> None:
    tally = agents.tally
    lines = ["", "chaos under load: fault                        recovered in"]
    lines += [f"  {name:<44} {seconds:6.1f} s" for name, seconds in recovered.items()]
    lines.append(f"faults injected: {len(recovered)}")
    lines.append("requests: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.requests.items())))
    lines.append(
        "errors by kind: "
        + (", ".join(f"{k} {v}" for k, v in sorted(tally.errors.items())) or "none")
    )
    lines.append(f"DMs: {dict(statuses)}; operations: {len(operations)}")
    lines.append(f"items lost: {len(lost)}; duplicates: {duplicates}")
    lines.append(f"MCP sessions opened: {agents.mcp_sessions}; lost: {agents.mcp_failures[:5]}")
    print("\n".join(lines))
