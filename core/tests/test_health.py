"""Health: /healthz answers without I/O; /readyz checks every dependency at once, each with its
latency and a reason without internal addresses; `manage.py health` exits 0 or 1."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from chain.stack import free_port
from core import chains
from dev.testing import ScriptedServer
from evm.userops import entry_point_address

# The card's chain keeps the plain names; the other chain (31338) is checked by id.
NAMES = [
    "database",
    "broker",
    "cache",
    "events",
    "chain_rpc",
    "chain_rpc:31338",
    "bundler",
    "bundler:31338",
]


@pytest.fixture
def rpc():
    """The card chain's node and bundler: one scripted JSON-RPC server answering both."""
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def l2_rpc():
    """The other chain's node and bundler."""
    with ScriptedServer() as server:
        yield server


def _point(settings, chain_id: int, url: str) -> None:
    settings.CHAINS = chains.with_endpoints(chain_id, rpc_url=url, bundler_url=url)


@pytest.fixture
def ready(settings, rpc, l2_rpc, tmp_path):
    server = rpc
    for chain_id, scripted in ((31337, rpc), (31338, l2_rpc)):
        scripted.results = {
            "eth_chainId": hex(chain_id),
            "eth_supportedEntryPoints": [entry_point_address(settings.ENTRY_POINT_VERSION)],
        }
        _point(settings, chain_id, scripted.url)
    settings.HEALTH_CHECK_TIMEOUT_SECONDS = 0.5
    if settings.EVENTS_URL.startswith("local"):
        settings.EVENTS_DIR = tmp_path / "events"
    return server


def _checks(response) -> dict[str, dict]:
    return {check["name"]: check for check in response.json()["checks"]}


@pytest.mark.django_db
def test_it_answers_healthz_without_any_query(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "Set-Cookie" not in response.headers


def test_it_refuses_post_on_the_health_endpoints(client):
    assert client.post("/healthz").status_code == 405
    assert client.post("/readyz").status_code == 405


@pytest.mark.django_db(transaction=True)
def test_it_is_ready_when_every_dependency_answers(client, ready):
    response = client.get("/readyz")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "ok"
    assert [check["name"] for check in body["checks"]] == NAMES
    for check in body["checks"]:
        assert check["ok"] is True and check["error"] is None
        assert isinstance(check["latency_ms"], int) and check["latency_ms"] >= 0
    methods = {request["method"] for request in ready.requests}
    assert methods == {"eth_chainId", "eth_supportedEntryPoints"}


@pytest.mark.django_db(transaction=True)
def test_it_is_unavailable_when_the_chain_rpc_refuses(client, settings, ready):
    port = free_port()
    settings.CHAINS = chains.with_endpoints(31337, rpc_url=f"http://127.0.0.1:{port}")

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["status"] == "unavailable"
    checks = _checks(response)
    assert checks["chain_rpc"]["ok"] is False
    assert checks["chain_rpc"]["error"] == "connection refused"
    assert str(port) not in response.content.decode()
    assert "127.0.0.1" not in response.content.decode()
    assert all(checks[name]["ok"] for name in NAMES if name != "chain_rpc")
    assert checks["chain_rpc"]["chain"] == "Gnosis (local)"
    assert checks["chain_rpc"]["required"] is True


@pytest.mark.django_db(transaction=True)
def test_another_chain_down_is_reported_by_name_and_the_instance_stays_ready(
    client, settings, ready
):
    port = free_port()
    settings.CHAINS = chains.with_endpoints(
        31338, rpc_url=f"http://127.0.0.1:{port}", bundler_url=f"http://127.0.0.1:{port}"
    )

    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    checks = _checks(response)
    for name in ("chain_rpc:31338", "bundler:31338"):
        assert checks[name]["ok"] is False
        assert checks[name]["error"] == "connection refused"
        assert checks[name]["chain"] == "Base (local)"
        assert checks[name]["required"] is False
    assert checks["chain_rpc"]["ok"] and checks["bundler"]["ok"]
    assert str(port) not in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_it_reports_a_hanging_bundler_within_the_timeout(client, ready):
    ready.mode = "hang"  # the chain RPC shares the server: both hang

    response = client.get("/readyz")

    assert response.status_code == 503
    checks = _checks(response)
    for name in ("chain_rpc", "bundler"):
        assert checks[name]["ok"] is False
        assert checks[name]["error"] == "timed out"
    assert checks["database"]["ok"] is True
    assert "127.0.0.1" not in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_it_reports_a_node_on_another_chain(client, settings, ready):
    ready.results["eth_chainId"] = hex(31339)

    checks = _checks(client.get("/readyz"))

    assert checks["chain_rpc"]["error"] == "the node of Gnosis (local) is on chain 31339, not 31337"


@pytest.mark.django_db(transaction=True)
def test_it_reports_a_bundler_without_the_configured_entry_point(client, ready):
    ready.results["eth_supportedEntryPoints"] = []

    checks = _checks(client.get("/readyz"))

    assert checks["bundler"]["ok"] is False
    assert "does not support the EntryPoint" in checks["bundler"]["error"]


@pytest.mark.django_db(transaction=True)
def test_it_is_unavailable_when_the_broker_is_unreachable(client, settings, ready):
    port = free_port()
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"

    response = client.get("/readyz")

    assert response.status_code == 503
    checks = _checks(response)
    assert checks["broker"]["ok"] is False
    assert checks["broker"]["error"] == "connection refused"
    assert str(port) not in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_it_reports_an_unexpected_error_by_its_type(client, monkeypatch, ready, caplog):
    from core import health

    def broken(timeout):
        raise ZeroDivisionError("a bug with a secret: postgres://u:p@db:5432/x")

    monkeypatch.setitem(health.CHECKS, "cache", broken)

    response = client.get("/readyz")

    assert response.status_code == 503
    assert _checks(response)["cache"]["error"] == "unexpected error: ZeroDivisionError"
    assert "secret" not in response.content.decode()
    assert any(record.exc_info for record in caplog.records if "cache" in record.getMessage())


def test_it_answers_health_endpoints_with_debug_off_and_https_redirect_on(client, settings):
    settings.DEBUG = False
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["picnic.example"]

    response = client.get("/healthz", HTTP_HOST="picnic.example")

    assert response.status_code == 200  # not a redirect to https
    assert client.get("/healthz", HTTP_HOST="10.0.0.7").status_code == 400  # not an allowed host


@pytest.mark.django_db(transaction=True)
def test_it_exits_0_from_the_command_when_ready(ready, capsys):
    call_command("health")

    out = capsys.readouterr().out
    for name in NAMES:
        assert any(line.startswith(name) and line.endswith("ok") for line in out.splitlines())
    assert out.strip().endswith("ready")


@pytest.mark.django_db(transaction=True)
def test_it_exits_1_from_the_command_when_a_dependency_is_down(ready, settings, capsys):
    settings.CHAINS = chains.with_endpoints(31337, bundler_url=f"http://127.0.0.1:{free_port()}")

    with pytest.raises(CommandError) as raised:
        call_command("health")

    assert raised.value.returncode == 1
    assert "bundler" in str(raised.value)
    assert "bundler" in capsys.readouterr().out


def test_it_exits_0_from_the_command_for_liveness(capsys):
    call_command("health", "--liveness")

    assert capsys.readouterr().out.strip() == "live"


@pytest.mark.django_db
def test_the_broker_check_shows_each_queue_kinds_backlog(client, ready, settings):
    """Messages waiting in a Redis queue (its workers down or busy) show under the broker."""
    import uuid

    from picnic.celery import app

    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("the per-queue backlog is read from a Redis broker")
    prefix = f"health-{uuid.uuid4().hex[:8]}."
    settings.CELERY_QUEUES_BY_KIND = {k: prefix + k for k in settings.CELERY_QUEUE_KINDS}
    try:
        for _ in range(3):
            app.send_task("messaging.tasks.delivery_deliver", args=["x"], queue=prefix + "dm")
        app.send_task(
            "operations.tasks.operation_dispatch", args=["y"], queue=prefix + "operations"
        )
        broker = _checks(client.get("/readyz"))["broker"]
        assert broker["ok"] is True
        assert broker["detail"] == {
            "queues": {"chain": 0, "dm": 3, "operations": 1, "housekeeping": 0, "fetch": 0}
        }
    finally:
        with app.connection_for_write() as conn:
            for queue in settings.CELERY_QUEUES_BY_KIND.values():
                conn.default_channel.queue_purge(queue)


@pytest.mark.django_db(transaction=True)
def test_it_says_which_node_is_primary_for_each_store_and_since_when(client, ready):
    """On the stores the tests run on (one node each: node 1), each store's check names its
    primary by its place in the configured list, when this process saw it become primary and
    how often it moved; the chain checks have none. No address is shown."""
    from datetime import datetime

    response = client.get("/readyz")

    checks = _checks(response)
    for store in ("database", "broker", "cache", "events"):
        primary = checks[store]["primary"]
        assert set(primary) == {"node", "since", "changes"}, primary
        assert primary["node"] == "node 1"
        assert datetime.fromisoformat(primary["since"]).tzinfo is not None
        assert primary["changes"] == 0
    for name in ("chain_rpc", "bundler"):
        assert checks[name]["primary"] is None
    assert "127.0.0.1" not in response.content.decode()
