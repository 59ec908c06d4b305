"""Slow servers on the other end of our fetches: a metadata document and
a logo served one byte a second by real local servers. The fetch ends at its deadline, the
token request is a 401 invalid_client, no database connection waits with it, and the web
stays ready and serves others meanwhile; logos are fetched on their own queue."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.db import connection, connections
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import Application

from core import chains
from dev.testing import ScriptedServer, start_celery_worker, stop_celery_worker, wait_until
from evm.userops import entry_point_address
from mcp_adapter.models import McpTask, TaskKind, TaskStatus
from oauth.models import ClientProfile
from oauth.services import client_logo_fetch
from oauth.tests.conftest import CALLBACK
from oauth.tests.logo_server import LogoServer
from oauth.tests.tls import DocumentServer

DEADLINE = 3.0
REQUESTS = 3


@pytest.fixture
def documents(tmp_path, monkeypatch, settings):
    cache.clear()  # DOT keeps its failure backoff in the cache
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    settings.OAUTH2_CIMD_FETCH_SECONDS = DEADLINE
    with DocumentServer(tmp_path) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(server.ca))  # the fetcher trusts our CA
        server.document = {
            "client_name": "Slow agent",
            "redirect_uris": [CALLBACK],
            "token_endpoint_auth_method": "none",
        }
        yield server
    cache.clear()


@pytest.fixture
def ready(settings, tmp_path):
    """What /readyz checks besides the database, broker and cache: both chains' node and
    bundler (one scripted JSON-RPC server each) and the event store."""
    with ScriptedServer() as card, ScriptedServer() as l2:
        for chain_id, scripted in ((31337, card), (31338, l2)):
            scripted.results = {
                "eth_chainId": hex(chain_id),
                "eth_supportedEntryPoints": [entry_point_address(settings.ENTRY_POINT_VERSION)],
            }
            settings.CHAINS = chains.with_endpoints(
                chain_id, rpc_url=scripted.url, bundler_url=scripted.url
            )
        if settings.EVENTS_URL.startswith("local"):
            settings.EVENTS_DIR = tmp_path / "events"
        yield


def _other_connections() -> int:
    """Connections to the test database besides this thread's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


@pytest.mark.postgres  # it counts connections in pg_stat_activity
@pytest.mark.django_db(transaction=True)
def test_a_drip_fed_document_is_cut_off_at_the_deadline_and_holds_no_connection(
    documents, ready, client
):
    client_id = f"{documents.origin}/drip.json"
    answers: list = []

    def token_request() -> None:
        # A thread of its own: its own database connection, as in the web process.
        try:
            answers.append(
                Client().post(
                    "/o/token/",
                    {
                        "grant_type": "authorization_code",
                        "code": "whatever",
                        "redirect_uri": CALLBACK,
                        "client_id": client_id,
                        "code_verifier": "v" * 43,
                    },
                )
            )
        finally:
            connections.close_all()

    # Earlier tests of a full run may leave connections of their own (servers, threads):
    # the count is taken before, and the waiting requests must add none to it.
    before = _other_connections()
    started = time.monotonic()
    threads = [threading.Thread(target=token_request, daemon=True) for _ in range(REQUESTS)]
    for thread in threads:
        thread.start()
    assert documents.dripping.wait(10), "no fetch started"
    while len(documents.drips) < REQUESTS and time.monotonic() - started < 10:
        time.sleep(0.05)
    assert len(documents.drips) == REQUESTS  # every request is waiting on the drip

    # While they wait: none of them holds a database connection, and the web answers.
    assert _other_connections() <= before
    ready_answer = client.get("/readyz")
    assert ready_answer.status_code == 200, ready_answer.json()
    assert client.get("/accounts/login/").status_code == 200

    for thread in threads:
        thread.join(DEADLINE + 20)  # a liveness bound; the document alone takes minutes
    assert not any(thread.is_alive() for thread in threads)
    elapsed = time.monotonic() - started
    for answer in answers:
        assert answer.status_code == 401
        assert answer.json()["error"] == "invalid_client"
    assert len(answers) == REQUESTS
    for record in documents.drips:
        assert record.cut_off.wait(10)  # we hung up ...
        assert record.sent < record.size  # ... before the document was whole
    assert not Application.objects.filter(client_id=client_id).exists()
    assert not ClientProfile.objects.filter(client_id=client_id).exists()
    print(f"{REQUESTS} drip-fed token requests answered 401 in {elapsed:.1f}s")


@pytest.mark.django_db
def test_a_drip_fed_logo_is_cut_off_at_the_deadline(settings, public_client, caplog):
    settings.AGENT_LOGO_ALLOW_LOOPBACK = True
    settings.AGENT_LOGO_TIMEOUT_SECONDS = DEADLINE
    with LogoServer() as site:
        profile = ClientProfile.objects.create(
            client_id=public_client.client_id, logo_uri=f"{site.url}/drip.png"
        )
        assert client_logo_fetch(profile_id=profile.pk) is False
        [record] = site.drips
        assert record.cut_off.wait(10)  # we hung up ...
        assert record.sent < record.size  # ... before the logo was whole
    profile.refresh_from_db()
    assert (profile.logo_png, profile.logo_sha256) == (None, "")
    assert f"not fetched within {DEADLINE:g}s" in caplog.text


def test_logo_fetches_have_a_queue_of_their_own(settings):
    """A drip-fed logo occupies a `fetch` worker, never the housekeeping one that runs the
    purges and the lease reaping (Celery's own routing of each task, in a fresh process:
    picnic/tests/test_production.py)."""
    queues = settings.CELERY_QUEUES_BY_KIND
    routes = settings.CELERY_TASK_ROUTES
    assert routes["oauth.tasks.client_logo_fetch"] == {"queue": queues["fetch"]}
    assert queues["fetch"] == f"{settings.CELERY_QUEUE_PREFIX}fetch"
    for housekeeping in (
        "messaging.tasks.deliveries_reap_leases",
        "actions.tasks.actions_purge_retained",
    ):
        assert routes[housekeeping] == {"queue": queues["housekeeping"]}


@pytest.mark.django_db(transaction=True)
def test_a_drip_fed_logo_on_a_worker_does_not_hold_up_housekeeping(
    settings, public_client, user, tmp_path
):
    """Real workers, one per queue kind as the Procfile runs them (housekeeping has one
    process): while a logo drips into the fetch worker, the housekeeping worker purges."""
    from picnic.celery import app

    prefix = f"slowfetch-{uuid.uuid4().hex[:8]}."
    env = {
        "CELERY_QUEUE_PREFIX": prefix,
        "AGENT_LOGO_ALLOW_LOOPBACK": "true",
        # Long enough for the housekeeping worker to purge while the logo still drips; the
        # test then waits this out, so no longer than that.
        "AGENT_LOGO_TIMEOUT_SECONDS": "12",
    }

    def enqueue(name: str, *args: str) -> None:
        # Where production routes it (settings.CELERY_TASK_ROUTES), under this test's prefix.
        kind = settings.CELERY_TASK_ROUTES[name]["queue"].removeprefix(settings.CELERY_QUEUE_PREFIX)
        app.send_task(name, args=list(args), queue=f"{prefix}{kind}")

    expired = McpTask.objects.create(
        user=user,
        application=public_client,
        tool="transfer",
        kind=TaskKind.ACTION,
        protocol_version="2025-11-25",
        status=TaskStatus.COMPLETED,
        ttl_ms=1000,
        expires_at=timezone.now() - timedelta(minutes=1),
    )
    workers = [
        start_celery_worker(queue=f"{prefix}{kind}", log_path=tmp_path / f"{kind}.log", env=env)
        for kind in ("fetch", "housekeeping")
    ]
    try:
        with LogoServer() as site:
            profile = ClientProfile.objects.create(
                client_id=public_client.client_id, logo_uri=f"{site.url}/drip.png"
            )
            enqueue("oauth.tasks.client_logo_fetch", str(profile.pk))
            assert site.dripping.wait(90), "no worker fetched the logo"
            enqueue("mcp_adapter.tasks.tasks_purge_expired")
            wait_until(lambda: not McpTask.objects.filter(pk=expired.pk).exists(), timeout=20)
            [record] = site.drips
            assert not record.cut_off.is_set()  # purged while the logo was still dripping
            assert record.cut_off.wait(60)  # then the fetch ended at its deadline
            assert record.sent < record.size
    finally:
        for proc in workers:
            stop_celery_worker(proc)
        with app.connection_for_write() as conn:
            for kind in ("fetch", "housekeeping"):
                conn.default_channel.queue_purge(f"{prefix}{kind}")
    profile.refresh_from_db()
    assert (profile.logo_png, profile.logo_sha256) == (None, "")
