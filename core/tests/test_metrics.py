"""/metrics: the bearer token, and the values a real scrape shows after real work — transitions
through the services, provider calls against local servers (answering, hanging, refusing),
database gauges from rows, the broker's queue backlog, and counters of several processes summed
in multiprocess mode. Counters live for the whole test process, so tests compare a scrape
before and after the work."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from actions.evm_clients import bundler_client
from actions.execution.services import action_reconcile
from actions.execution.transitions import ReconcileOutcome
from chain.stack import free_port
from core import metrics
from core.chains import with_endpoints
from core.http import JsonHttpClient, NotSent, OutcomeUnknown
from core.lifecycle import Actor
from dev.testing import ScriptedServer
from evm.bundler import BundlerUnavailable
from messaging.models import D, Delivery
from messaging.services import delivery_cancel
from messaging.worker import delivery_process

TOKEN = "metrics-token-for-tests-0123456789"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client) -> dict[tuple[str, frozenset], float]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse(response.content.decode())


def parse(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


# --- The endpoint --------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_does_not_exist_without_a_configured_token(client, settings):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer anything").status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer wrong-token-of-some-length", f"Basic {TOKEN}", f"Bearer {TOKEN}x"],
)
def test_it_refuses_a_missing_or_wrong_token(client, token, authorization):
    extra = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    response = client.get("/metrics", **extra)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"picnic_" not in response.content


@pytest.mark.django_db
def test_it_answers_get_only(client, token):
    response = client.post("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 405


@pytest.mark.django_db
def test_it_answers_the_prometheus_text_format_with_the_token(client, token):
    samples = scrape(client)
    assert value(samples, "picnic_metrics_collector_up", collector="database") == 1.0
    assert ("picnic_credits_held", frozenset()) in samples


# --- Counters from real work -------------------------------------------------------------------


def test_a_dm_sent_counts_its_transitions_outcome_and_provider_call(
    client, token, x_server, queue, django_capture_on_commit_callbacks
):
    before = scrape(client)
    with django_capture_on_commit_callbacks(execute=True):
        delivery = queue()
        assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.SENT
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    for status in ("queued", "claimed", "sending", "sent"):
        assert delta("picnic_lifecycle_transitions_total", lifecycle="delivery", status=status) == 1
    assert delta("picnic_dm_outcomes_total", outcome="sent") == 1
    assert delta("picnic_provider_request_duration_seconds_count", provider="x") == 1
    assert delta("picnic_provider_errors_total", provider="x", kind="timeout") == 0


def test_a_rolled_back_transition_is_not_counted(client, token, queue):
    # The `db` fixture's transaction never commits: nothing written in it is counted.
    before = scrape(client)
    delivery = queue()
    delivery_cancel(delivery=delivery, user=delivery.created_by, staff=True)
    after = scrape(client)
    for status in ("queued", "cancelled"):
        labels = {"lifecycle": "delivery", "status": status}
        assert value(after, "picnic_lifecycle_transitions_total", **labels) == value(
            before, "picnic_lifecycle_transitions_total", **labels
        )


def test_a_hanging_provider_counts_a_timeout_and_an_unknown_dm(
    client, token, x_server, queue, django_capture_on_commit_callbacks
):
    before = scrape(client)
    with django_capture_on_commit_callbacks(execute=True):
        delivery = queue("[hang] hello")
        assert delivery_process(delivery_id=delivery.pk, worker_id="w1") == D.UNKNOWN
    after = scrape(client)
    assert value(after, "picnic_provider_errors_total", provider="x", kind="timeout") == (
        value(before, "picnic_provider_errors_total", provider="x", kind="timeout") + 1
    )
    assert value(after, "picnic_dm_outcomes_total", outcome="unknown") == (
        value(before, "picnic_dm_outcomes_total", outcome="unknown") + 1
    )
    # The hang lasted the 1 s timeout, and that is what the histogram saw.
    assert value(
        after, "picnic_provider_request_duration_seconds_bucket", provider="x", le="0.5"
    ) == value(before, "picnic_provider_request_duration_seconds_bucket", provider="x", le="0.5")


@pytest.mark.django_db
def test_provider_errors_are_counted_by_kind(client, token):
    before = scrape(client)
    refusing = JsonHttpClient(f"http://127.0.0.1:{free_port()}", timeout=1.0, provider="lifi")
    with pytest.raises(NotSent):
        refusing.call("POST", "/quote")
    with ScriptedServer() as server:
        server.mode = "http500"
        answer = JsonHttpClient(server.url, timeout=1.0, provider="lifi").call("POST", "/quote")
        assert answer.status == 500
        server.mode = "drop"
        with pytest.raises(OutcomeUnknown):
            JsonHttpClient(server.url, timeout=1.0, provider="lifi").call("POST", "/quote")
    after = scrape(client)
    for kind in ("not_sent", "http_5xx", "connection_lost"):
        assert value(after, "picnic_provider_errors_total", provider="lifi", kind=kind) == (
            value(before, "picnic_provider_errors_total", provider="lifi", kind=kind) + 1
        ), kind
    # Sent twice (the refused one never was): two observations.
    count = "picnic_provider_request_duration_seconds_count"
    assert value(after, count, provider="lifi") == value(before, count, provider="lifi") + 2


@pytest.mark.django_db
def test_bundler_calls_through_web3_are_timed_and_their_errors_counted(client, token, settings):
    before = scrape(client)
    with ScriptedServer() as server:
        settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url=server.url)
        server.result = ["0x" + "11" * 20]
        assert bundler_client(31337, timeout=0.5).supported_entry_points() == server.result
        server.mode = "rpc_error"
        with pytest.raises(BundlerUnavailable.__mro__[1]):  # BundlerError
            bundler_client(31337, timeout=0.5).supported_entry_points()
        server.mode = "hang"
        with pytest.raises(BundlerUnavailable):
            bundler_client(31337, timeout=0.5).supported_entry_points()
    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, bundler_url=f"http://127.0.0.1:{free_port()}"
    )
    with pytest.raises(BundlerUnavailable):
        bundler_client(31337, timeout=0.5).supported_entry_points()
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, provider="bundler", **labels) - value(
            before, name, provider="bundler", **labels
        )

    assert delta("picnic_provider_request_duration_seconds_count") == 4
    assert delta("picnic_provider_errors_total", kind="rpc_error") == 1
    assert delta("picnic_provider_errors_total", kind="timeout") == 1
    assert delta("picnic_provider_errors_total", kind="connection_error") == 1


@pytest.mark.django_db
def test_reconcile_outcomes_are_counted(client, token, user, application):
    from mcp_adapter.tests.conftest import make_action

    action = make_action(user, application)  # proposed: nothing to reconcile
    before = scrape(client)
    outcome = action_reconcile(action_id=action.pk, actor=Actor.worker())
    assert outcome == ReconcileOutcome.NOT_PENDING
    after = scrape(client)
    name = "picnic_action_reconcile_total"
    assert (
        value(after, name, outcome="not_pending") == value(before, name, outcome="not_pending") + 1
    )


# --- Gauges read from the database at scrape time ------------------------------------------------


@pytest.mark.django_db
def test_database_gauges_reflect_the_rows(client, token, queue, settings, user):
    from operations.models import Wallet

    now = timezone.now()
    old, new = queue(), queue()
    Delivery.objects.filter(pk=old.pk).update(created_at=now - timedelta(hours=2))
    # Due for longer than a lease and taken by no worker: stuck.
    Delivery.objects.filter(pk=new.pk).update(
        next_attempt_at=now - timedelta(seconds=settings.DM_LEASE_SECONDS + 60)
    )
    Wallet.objects.create(owner=user, available_credits=Decimal(5), held_credits=Decimal("2.5"))

    samples = scrape(client)
    assert value(samples, "picnic_lifecycle_items", lifecycle="delivery", status="queued") == 2
    assert value(samples, "picnic_lifecycle_items", lifecycle="delivery", status="sending") == 0
    age = value(
        samples, "picnic_lifecycle_oldest_age_seconds", lifecycle="delivery", status="queued"
    )
    assert 7200 <= age < 7200 + 600
    assert (
        value(samples, "picnic_lifecycle_oldest_age_seconds", lifecycle="action", status="signed")
        == 0
    )
    assert value(samples, "picnic_lifecycle_stuck_items", lifecycle="delivery") == 1
    assert value(samples, "picnic_lifecycle_stuck_items", lifecycle="action") == 0
    assert value(samples, "picnic_lifecycle_stuck_items", lifecycle="operation") == 0
    assert value(samples, "picnic_credits_held") == 2.5
    # A terminal delivery is no longer an open item.
    Delivery.objects.filter(pk=new.pk).update(status=D.CANCELLED)
    samples = scrape(client)
    assert value(samples, "picnic_lifecycle_items", lifecycle="delivery", status="queued") == 1
    assert value(samples, "picnic_lifecycle_stuck_items", lifecycle="delivery") == 0


@pytest.mark.django_db
def test_the_scrape_costs_the_same_queries_whatever_the_row_count(
    client, token, queue, user, application, django_assert_num_queries
):
    from mcp_adapter.tests.conftest import make_action

    # Per lifecycle (five) one GROUP BY, one stuck count for each of the four with a stuck
    # selector (spend permissions have none), then the credits.
    queries = 5 + 4 + 1
    queue()
    make_action(user, application)
    with django_assert_num_queries(queries):
        scrape(client)
    for _ in range(20):
        queue()
        make_action(user, application)
    with django_assert_num_queries(queries):
        samples = scrape(client)
    assert value(samples, "picnic_lifecycle_items", lifecycle="action", status="proposed") == 21


@pytest.mark.django_db
def test_an_unreadable_database_leaves_its_gauges_out_and_says_so(client, token, monkeypatch):
    def broken():
        raise RuntimeError("database down")

    monkeypatch.setattr(
        metrics.StateCollector,
        "SOURCES",
        (("database", broken), *metrics.StateCollector.SOURCES[1:]),
    )
    samples = scrape(client)
    assert value(samples, "picnic_metrics_collector_up", collector="database") == 0
    assert ("picnic_credits_held", frozenset()) not in samples


# --- The broker's queue backlog ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_queue_backlog_counts_messages_no_worker_took(client, token, settings):
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("needs CELERY_BROKER_URL=redis://…")
    from picnic.celery import app

    name = f"metrics-test-{uuid.uuid4().hex[:8]}"
    settings.METRICS_CELERY_QUEUES = [name, "celery"]
    try:
        assert value(scrape(client), "picnic_celery_queue_backlog_messages", queue=name) == 0
        for _ in range(3):
            app.send_task("picnic.nothing", queue=name)
        app.send_task("picnic.nothing", queue=name, priority=9)  # kombu's priority list
        samples = scrape(client)
        assert value(samples, "picnic_celery_queue_backlog_messages", queue=name) == 4
        assert ("picnic_celery_queue_backlog_messages", frozenset({("queue", "celery")})) in samples
        assert value(samples, "picnic_metrics_collector_up", collector="celery_queues") == 1
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.client.delete(name, *(f"{name}\x06\x16{p}" for p in (3, 6, 9)))


@pytest.mark.django_db
def test_the_queue_backlog_of_the_filesystem_broker(client, token, settings, tmp_path):
    from kombu import Connection

    folder = tmp_path / "queue"
    folder.mkdir()
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(tmp_path / "control"),
    }
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    settings.METRICS_CELERY_QUEUES = ["dm", "chain"]
    with Connection("filesystem://", transport_options=options) as conn:
        dm = conn.SimpleQueue("dm")
        dm.put({"n": 1})
        dm.put({"n": 2})
        dm.close()
    samples = scrape(client)
    assert value(samples, "picnic_celery_queue_backlog_messages", queue="dm") == 2
    assert value(samples, "picnic_celery_queue_backlog_messages", queue="chain") == 0


def test_the_monitored_queues_are_those_of_each_kind_of_work(settings):
    settings.METRICS_CELERY_QUEUES = []
    settings.CELERY_QUEUES_BY_KIND = {"chain": "p.chain", "dm": "p.dm"}
    assert metrics.monitored_queues() == ["p.chain", "p.dm"]
    settings.METRICS_CELERY_QUEUES = ["only"]
    assert metrics.monitored_queues() == ["only"]


# --- Several processes, one scrape ----------------------------------------------------------------

CHILD = """
import sys
from core import metrics
from core.http import JsonHttpClient
metrics.count_reconcile("executed")
JsonHttpClient(sys.argv[1], timeout=2.0, provider="prices").call("POST", "/")
"""


def run_children(env: dict[str, str]) -> list[subprocess.Popen]:
    """Two other processes run CHILD (each counts a reconcile and a provider call against a
    local server) and exit 0."""
    with ScriptedServer() as provider:
        provider.result = {"ok": True}
        children = [
            subprocess.Popen([sys.executable, "-c", CHILD, provider.url], cwd=ROOT, env=env)
            for _ in range(2)
        ]
        assert [child.wait(timeout=60) for child in children] == [0, 0]
    return children


@pytest.mark.django_db
def test_one_scrape_sums_the_counters_of_every_process(client, token, tmp_path, monkeypatch):
    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory), "PATH": "/usr/bin:/bin"}
    children = run_children(env)
    for child in children:
        metrics.mark_process_dead(child.pid)  # what gunicorn's child_exit does
    assert len(list(directory.glob("counter_*.db"))) == 2

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    samples = scrape(client)
    assert value(samples, "picnic_action_reconcile_total", outcome="executed") == 2
    assert value(samples, "picnic_provider_request_duration_seconds_count", provider="prices") == 2
    # The scrape-time gauges are still there beside the summed counters.
    assert value(samples, "picnic_metrics_collector_up", collector="database") == 1

    metrics.clear_multiprocess_dir()  # what `make prod` does before starting
    assert not list(directory.glob("*.db"))
    samples = scrape(client)
    assert value(samples, "picnic_action_reconcile_total", outcome="executed") == 0


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_writes_what_the_web_scrape_shows(
    client,
    token,
    settings,
    tmp_path,
    monkeypatch,
    celery_test_queue,
    member,
    application,
    workspace,
    social_account,
):
    """The backlog of a queue no worker serves, then a real worker (its own process, the same
    PROMETHEUS_MULTIPROC_DIR) taking it: the web scrape shows the worker's counters."""
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("needs CELERY_BROKER_URL=redis://…")
    from dev.providers.local_x import LocalXServer
    from dev.testing import start_celery_worker, wait_until
    from messaging.services import delivery_send
    from messaging.tests.conftest import TOKEN_ENV, X_TOKEN
    from picnic.celery import app

    directory = tmp_path / "prometheus"
    directory.mkdir()
    settings.METRICS_CELERY_QUEUES = [celery_test_queue]
    with app.connection_for_write() as conn:  # what earlier tests enqueued
        conn.default_channel.queue_purge(celery_test_queue)
    delivery = delivery_send(
        user=member,
        application=application,
        workspace_id=workspace.pk,
        social_account_id=social_account.pk,
        recipient_id="987654321",
        text="hello",
        idempotency_key=uuid.uuid4(),
    ).delivery
    backlog = "picnic_celery_queue_backlog_messages"
    assert value(scrape(client), backlog, queue=celery_test_queue) == 1  # nobody serves it

    with LocalXServer(token=X_TOKEN) as server:
        proc = start_celery_worker(
            queue=celery_test_queue,
            log_path=tmp_path / "worker.log",
            env={
                "PROMETHEUS_MULTIPROC_DIR": str(directory),
                "X_API_BASE_URL": server.url,
                TOKEN_ENV: X_TOKEN,
            },
        )
        try:
            wait_until(lambda: Delivery.objects.get(pk=delivery.pk).status == D.SENT, timeout=60)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            proc.log.close()
    metrics.mark_process_dead(proc.pid)

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    samples = scrape(client)
    assert value(samples, backlog, queue=celery_test_queue) == 0
    assert value(samples, "picnic_dm_outcomes_total", outcome="sent") == 1
    for status in ("claimed", "sending", "sent"):
        labels = {"lifecycle": "delivery", "status": status}
        assert value(samples, "picnic_lifecycle_transitions_total", **labels) == 1
    # Created here, in the test process, which writes no files: not in this scrape.
    assert (
        value(samples, "picnic_lifecycle_transitions_total", lifecycle="delivery", status="queued")
        == 0
    )
    assert value(samples, "picnic_provider_request_duration_seconds_count", provider="x") == 1


@pytest.mark.django_db(transaction=True)
def test_mcp_tool_calls_are_counted_by_tool_and_outcome(
    client, token, user, application, make_token, live_server, settings, tmp_path
):
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from mcp_adapter.api import PicnicApi
    from mcp_adapter.server import PicnicMCP
    from mcp_adapter.tests.conftest import make_action, run

    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    action = make_action(user, application)
    server = PicnicMCP(
        api=PicnicApi(live_server.url),
        token=make_token(user, application, scope="read:actions").token,
    )

    async def calls():
        async with Client(server) as mcp:
            ok = await mcp.call_tool("get_action_status", {"action_id": str(action.pk)})
            missing = await mcp.call_tool("get_action_status", {"action_id": str(uuid.uuid4())})
            with pytest.raises(MCPError):
                await mcp.call_tool("no such tool", {})
            return ok, missing

    before = scrape(client)
    ok, missing = run(calls)
    assert not ok.is_error and missing.is_error
    after = scrape(client)

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    calls_total = "picnic_mcp_tool_calls_total"
    assert delta(calls_total, tool="get_action_status", outcome="ok") == 1
    assert delta(calls_total, tool="get_action_status", outcome="error") == 1
    assert delta(calls_total, tool="(unknown)", outcome="raised") == 1
    latency = "picnic_mcp_tool_call_duration_seconds_count"
    assert delta(latency, tool="get_action_status", outcome="ok") == 1
    assert delta(latency, tool="get_action_status", outcome="error") == 1


GUNICORN_CONF = """
from core.metrics import gunicorn_child_exit as child_exit  # noqa: F401
"""


@pytest.mark.django_db(transaction=True)
def test_every_gunicorn_worker_answers_the_sum_of_every_process(
    tmp_path, user, application, make_token
):
    """Real gunicorn, 2 workers: an overdue action read through the API expires in whichever
    worker answers (a transition counted there), two other processes count too, and every
    scrape, whichever worker answers it, shows all of it."""
    pytest.importorskip("gunicorn")
    import os
    import time
    import urllib.request

    from actions.execution.models import Action
    from dev.testing import database_url, wait_until
    from mcp_adapter.tests.conftest import make_action

    directory = tmp_path / "prometheus"
    directory.mkdir()
    (tmp_path / "gunicorn_conf.py").write_text(GUNICORN_CONF)
    port = free_port()
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
        "METRICS_TOKEN": TOKEN,
        "DATABASE_URL": database_url(),
        "DJANGO_DEBUG": "true",
    }
    action = make_action(user, application)
    Action.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    access = make_token(user, application, scope="read:actions").token
    run_children(env)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "picnic.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--config",
            str(tmp_path / "gunicorn_conf.py"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "gunicorn.log", "w"),  # noqa: SIM115 - closed with the process
    )
    base = f"http://127.0.0.1:{port}"

    def get(path, bearer):
        request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {bearer}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read().decode()

    def up():
        try:
            return get("/healthz", "-")
        except OSError:
            time.sleep(0.2)
            return None

    try:
        wait_until(up, timeout=120)
        status = json.loads(get(f"/api/v1/actions/{action.pk}", access))["status"]
        assert status == "expired"
        for _ in range(6):  # whichever worker takes the connection
            samples = parse(get("/metrics", TOKEN))
            assert value(samples, "picnic_action_reconcile_total", outcome="executed") == 2
            assert (
                value(samples, "picnic_provider_request_duration_seconds_count", provider="prices")
                == 2
            )
            assert (
                value(
                    samples,
                    "picnic_lifecycle_transitions_total",
                    lifecycle="action",
                    status="expired",
                )
                == 1
            )
    finally:
        server.terminate()
        server.wait(timeout=30)


# --- Which node is primary ------------------------------------------------------------------


@pytest.mark.django_db
def test_it_says_which_node_is_primary_for_each_store_and_since_when(client, token):
    samples = scrape(client)

    assert value(samples, "picnic_metrics_collector_up", collector="store_primaries") == 1
    for store in ("database", "broker", "cache", "events"):
        assert value(samples, "picnic_store_primary", store=store, node="node 1") == 1
        since = value(samples, "picnic_store_primary_since_timestamp_seconds", store=store)
        assert since > 1_700_000_000
        assert ("picnic_store_primary_changes", frozenset({("store", store)})) in samples
