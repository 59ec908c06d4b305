"""The soak test: the production process model under load while a worker dies.

gunicorn (2 uvicorn workers) + 2 Celery workers (one for the `dm` queue, one for the rest) +
beat, on PostgreSQL and Redis, with the local X DM API and the local Responses backend, which
record every request they receive. Concurrent clients create DM sends and generation
operations through the HTTP API with bearer tokens for about a minute; meanwhile the `dm`
worker is killed with SIGKILL (its whole process group) and, after a while, started again.

Then: nothing lost (every item the API accepted is in the database, ends terminal or in the
documented waiting state `unknown`, and its history agrees), nothing sent twice (at most one
X receipt per message, exactly one for each `sent`; one backend response per operation), and
`/readyz` and `/metrics` showed the dead worker's backlog while it was down (`DOWN_CHECKS`), and
the metrics every process wrote (multiprocess mode) add up to what the database says.

It runs in `make test` / CI (PostgreSQL + Redis) and takes about two minutes; it uses queues
of its own (a unique CELERY_QUEUE_PREFIX) on the session's fresh test database.
"""

from __future__ import annotations

import collections
import json
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings

from chain.stack import free_port
from dev import processes
from dev.providers.local_openai import LocalResponsesServer
from dev.providers.local_x import LocalXServer
from dev.testing import (
    DM_ENDS,
    OPERATION_ENDS,
    LoadThreads,
    database_url,
    load_test_env,
    scrape_metrics,
    wait_until,
)

pytestmark = [
    pytest.mark.soak,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not settings.CELERY_BROKER_URL.startswith("redis"),
        reason="the soak test needs a Redis broker (set CELERY_BROKER_URL=redis://…)",
    ),
]

X_TOKEN_ENV = "PICNIC_SOAK_X_TOKEN"
X_TOKEN = "soak-x-token"
BACKEND_KEY = "soak-backend-key"
METRICS_TOKEN = secrets.token_urlsafe(24)
CLIENTS_PER_KIND = 2
LOAD_SECONDS = 12  # before the kill, and again after the restart
DOWN_SECONDS = 15  # the dm worker stays dead at least this long
DRAIN_SECONDS = 120  # bound for everything to settle after the clients stop


@dataclass
class System:
    base_url: str
    env: dict[str, str]
    prefix: str
    logs: Path
    x_api: LocalXServer
    backend: LocalResponsesServer
    procs: dict[str, processes.Process] = field(default_factory=dict)
    dm_starts: int = 0
    seen_backlog: dict[str, int] = field(default_factory=dict)

    def readyz(self) -> dict:
        status, _, body = processes.http("GET", f"{self.base_url}/readyz", timeout=30)
        assert status in (200, 503), status
        return json.loads(body)

    def backlog(self) -> dict[str, int]:
        broker = next(c for c in self.readyz()["checks"] if c["name"] == "broker")
        assert broker["ok"], broker
        return broker["detail"]["queues"]

    def metrics(self) -> dict[tuple[str, tuple], float]:
        return scrape_metrics(self.base_url, METRICS_TOKEN)

    def start_dm_worker(self) -> processes.Process:
        proc = processes.celery_worker(
            self.env, self.logs / "worker-dm.log", queues=[f"{self.prefix}dm"], concurrency=2
        )
        self.dm_starts += 1
        self.procs["worker_dm"] = proc.start()  # the log is appended to: count the starts
        wait_until(lambda: proc.log().count(" ready.") >= self.dm_starts, timeout=90)
        return proc


# --- checks while the dm worker is down: each polls until it holds (or fails the test) -----


def readyz_shows_the_dm_backlog(system: System) -> None:
    # Clients keep sending: the dm queue, whose only worker is dead, fills up.
    system.seen_backlog = wait_until(
        lambda: (backlog := system.backlog())["dm"] >= 3 and backlog, timeout=60
    )


def metrics_show_the_dm_backlog(system: System) -> None:
    key = ("picnic_celery_queue_backlog_messages", (("queue", f"{system.prefix}dm"),))
    wait_until(lambda: system.metrics().get(key, 0) >= 3, timeout=60)


DOWN_CHECKS: list[Callable[[System], None]] = [
    readyz_shows_the_dm_backlog,
    metrics_show_the_dm_backlog,
]


# --- the clients ----------------------------------------------------------------------------


class Clients(LoadThreads):
    """Concurrent API clients until stopped; what the API accepted is kept for the checks."""

    def __init__(self, system: System, token: str, workspace, social_account):
        super().__init__()
        self.system, self.token = system, token
        self.dm_body = {
            "workspace_id": str(workspace.pk),
            "social_account_id": str(social_account.pk),
            "recipient_id": "1234567890",
        }
        self.deliveries: dict[str, str] = {}  # id -> text
        self.operations: set[str] = set()
        for _ in range(CLIENTS_PER_KIND):
            self.add(self._one_dm)
            self.add(self._one_operation)

    def _post(self, path: str, body: dict) -> tuple[int, dict]:
        status, _, raw = processes.http(
            "POST", self.system.base_url + path, body=body, token=self.token, timeout=30
        )
        try:
            return status, json.loads(raw or b"{}")
        except ValueError:
            return status, {"unreadable": raw[:200].decode(errors="replace")}

    def _one_dm(self) -> None:
        text = f"soak {uuid.uuid4()}"
        body = {**self.dm_body, "text": text, "idempotency_key": str(uuid.uuid4())}
        status, answer = self._post("/private-messaging-api/actions/send", body)
        if status != 202:
            self.problems.append(f"send: {status} {answer}")
            return
        delivery_id = answer["action"]["id"]
        with self.lock:
            self.deliveries[delivery_id] = text
        # A client retrying after a lost answer: the same key is the same action.
        status, again = self._post("/private-messaging-api/actions/send", body)
        if status != 200 or again.get("action", {}).get("id") != delivery_id:
            self.problems.append(f"retried send: {status} {again}")

    def _one_operation(self) -> None:
        body = {"tool": "soak", "category": "soak", "input": f"soak {uuid.uuid4()}"}
        status, answer = self._post("/api/v1/operations", body)
        if status != 202:
            self.problems.append(f"operation: {status} {answer}")
            return
        with self.lock:
            self.operations.add(answer["id"])


# --- the system -----------------------------------------------------------------------------


@pytest.fixture
def system(tmp_path):
    from picnic.celery import app

    prefix = f"soak-{uuid.uuid4().hex[:8]}."
    nothing = f"http://127.0.0.1:{free_port()}"  # no chain here: those checks fail fast
    with (
        # A send takes a moment, so the kill is likely to catch one in flight (the clients
        # outpace the dm worker: it is always busy). At 0.25 s the backlog took 55 s to drain
        # after the load; at 0.1 s, 15 s, with about 600 sends and one caught by the kill.
        LocalXServer(token=X_TOKEN, work_seconds=0.1) as x_api,
        LocalResponsesServer(api_key=BACKEND_KEY, work_seconds=1.0) as backend,
    ):
        port = free_port()
        env = {
            **load_test_env(
                tmp_path,
                x_api_url=x_api.url,
                x_token_env=X_TOKEN_ENV,
                x_token=X_TOKEN,
                backend_url=backend.url,
                backend_key=BACKEND_KEY,
                metrics_token=METRICS_TOKEN,
            ),
            "DATABASE_URL": database_url(),
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "CACHE_URL": settings.CELERY_BROKER_URL,
            # Local event sockets in its own folder: Redis pub/sub channels span every
            # database of the server, and other test runs listen there.
            "EVENTS_URL": "local://",
            "EVENTS_DIR": str(tmp_path / "events"),
            "CELERY_QUEUE_PREFIX": prefix,
            "CHAIN_RPC_URL": nothing,
            "BUNDLER_RPC_URL": nothing,
            "HEALTH_CHECK_TIMEOUT_SECONDS": "2",
        }
        logs = tmp_path
        system = System(f"http://127.0.0.1:{port}", env, prefix, logs, x_api, backend)
        try:
            system.procs["web"] = processes.gunicorn(
                env, logs / "web.log", bind=f"127.0.0.1:{port}", workers=2
            ).start()
            system.procs["worker_rest"] = processes.celery_worker(
                env,
                logs / "worker-rest.log",
                queues=[
                    f"{prefix}{kind}" for kind in ("chain", "operations", "housekeeping", "fetch")
                ],
            ).start()
            system.start_dm_worker()
            system.procs["beat"] = processes.celery_beat(
                env, logs / "beat.log", schedule_path=tmp_path / "beat-schedule"
            ).start()
            wait_until(lambda: processes.answers(f"{system.base_url}/healthz"), timeout=90)
            wait_until(lambda: " ready." in system.procs["worker_rest"].log(), timeout=90)
            wait_until(lambda: "Sending due task" in system.procs["beat"].log(), timeout=90)
            yield system
        finally:
            for proc in system.procs.values():
                proc.stop()
            with app.connection_for_write() as conn:
                for kind in settings.CELERY_QUEUE_KINDS:
                    conn.default_channel.queue_purge(prefix + kind)


@pytest.fixture
def agent(make_user, application, make_token, monkeypatch):
    from messaging.models import Membership, Role, SocialAccount, Workspace
    from operations import billing

    user = make_user("soak-agent")
    workspace = Workspace.objects.create(name="Soak")
    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
    account = SocialAccount.objects.create(
        workspace=workspace, provider="x", handle="soak", credential_ref=f"env:{X_TOKEN_ENV}"
    )
    billing.wallet_grant(owner=user, amount=Decimal("1000000"), note="soak")
    token = make_token(
        user,
        application,
        scope="agent:dm_write agent:dm_read operations:read operations:write",
        expires_in=3600,
    )
    return token.token, workspace, account


def test_soak_kill_a_worker_under_load_nothing_lost_nothing_sent_twice(system, agent):
    from messaging.models import Delivery
    from operations import billing
    from operations.models import Operation, Wallet

    token, workspace, account = agent
    with Clients(system, token, workspace, account) as clients:
        time.sleep(LOAD_SECONDS)
        system.procs["worker_dm"].kill()
        killed_at = time.monotonic()
        for check in DOWN_CHECKS:
            check(system)
        time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - killed_at)))
        system.start_dm_worker()
        time.sleep(LOAD_SECONDS)
    assert clients.problems == []
    assert len(clients.deliveries) > 10 and len(clients.operations) > 10

    # Everything settles: the restarted worker drains its backlog, beat picks up the rest.
    def settled() -> bool:
        return not (
            Delivery.objects.filter(pk__in=clients.deliveries).exclude(status__in=DM_ENDS).exists()
            or Operation.objects.filter(pk__in=clients.operations)
            .exclude(state__in=OPERATION_ENDS)
            .exists()
        )

    wait_until(settled, timeout=DRAIN_SECONDS, interval=1)
    wait_until(lambda: system.backlog()["dm"] == 0, timeout=60)

    # Nothing lost: every accepted DM is there (the retries made no second one), ended.
    deliveries = {str(d.pk): d for d in Delivery.objects.filter(workspace=workspace)}
    assert set(deliveries) == set(clients.deliveries)
    statuses = collections.Counter(d.status for d in deliveries.values())
    # Only the sends the killed worker had in flight (its concurrency) may be `unknown`.
    assert set(statuses) <= {"sent", "unknown"}, statuses
    assert statuses["unknown"] <= 2, statuses
    for delivery in deliveries.values():
        history = list(
            delivery.history.order_by("timestamp", "id").values_list("status", flat=True)
        )
        assert history[0] == "queued" and history[-1] == delivery.status, history

    # Nothing sent twice: at most one X receipt per message; exactly one for each `sent`.
    receipts = collections.Counter(request["text"] for request in system.x_api.requests)
    assert max(receipts.values()) == 1
    for delivery_id, text in clients.deliveries.items():
        expected = {1} if deliveries[delivery_id].status == "sent" else {0, 1}
        assert receipts[text] in expected, (deliveries[delivery_id].status, receipts[text])

    # Operations: all there, all succeeded, one backend response each, the books balance.
    operations = Operation.objects.filter(pk__in=clients.operations)
    assert operations.count() == len(clients.operations)
    assert set(operations.values_list("state", flat=True)) == {"succeeded"}
    assert set(system.backend.by_key) == clients.operations
    assert len(system.backend.responses) == len(clients.operations)
    for operation in operations:
        assert billing.invariants(operation) == []
    assert billing.wallet_invariants(Wallet.objects.get(owner__username="soak-agent")) == []
    # The metrics of every process (both web workers, the killed worker and its successor, the
    # other worker) are summed in one scrape: the DM outcomes agree with the database, except
    # for a send the kill interrupted between its commit and its count.
    scraped = system.metrics()
    counted = scraped.get(("picnic_dm_outcomes_total", (("outcome", "sent"),)), 0)
    assert statuses["sent"] - 2 <= counted <= statuses["sent"], (counted, statuses)
    succeeded = scraped.get(
        (
            "picnic_lifecycle_transitions_total",
            (("lifecycle", "operation"), ("status", "succeeded")),
        ),
        0,
    )
    assert succeeded == len(clients.operations), (succeeded, len(clients.operations))
    print(  # the numbers of this run, for the record (pytest -rA or -s shows them)
        f"soak: {len(deliveries)} DMs {dict(statuses)}, {operations.count()} operations, "
        f"{len(system.x_api.requests)} X receipts, dm backlog seen while down {system.seen_backlog}"
    )
    # The web and the other worker lived through it all.
    assert all(system.procs[name].alive() for name in ("web", "worker_rest", "beat", "worker_dm"))
