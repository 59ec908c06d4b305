"""Health: /healthz answers without I/O; /readyz checks every dependency at once, each with its
latency and a reason without internal addresses; `manage.py health` exits 0 or 1."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from chain.stack import free_port
from core.testing import ScriptedServer
from evm.userops import entry_point_address

NAMES = ["database", "broker", "cache", "events", "chain_rpc", "bundler"]


@pytest.fixture
def rpc():
    """The chain node and the bundler: one scripted JSON-RPC server answering both."""
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def ready(settings, rpc, tmp_path):
    server = rpc
    server.results = {
        "eth_chainId": hex(settings.CHAIN_ID),
        "eth_supportedEntryPoints": [entry_point_address(settings.ENTRY_POINT_VERSION)],
    }
    settings.CHAIN_RPC_URL = server.url
    settings.BUNDLER_RPC_URL = server.url
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
    settings.CHAIN_RPC_URL = f"http://127.0.0.1:{port}"

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.json()["status"] == "unavailable"
    checks = _checks(response)
    assert checks["chain_rpc"]["ok"] is False
    assert checks["chain_rpc"]["error"] == "connection refused"
    assert str(port) not in response.content.decode()
    assert "127.0.0.1" not in response.content.decode()
    assert all(checks[name]["ok"] for name in NAMES if name != "chain_rpc")


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
    ready.results["eth_chainId"] = hex(settings.CHAIN_ID + 1)

    checks = _checks(client.get("/readyz"))

    assert checks["chain_rpc"]["error"] == (
        f"the node is on chain {settings.CHAIN_ID + 1}, CHAIN_ID is {settings.CHAIN_ID}"
    )


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
    settings.BUNDLER_RPC_URL = f"http://127.0.0.1:{free_port()}"

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
            "queues": {"chain": 0, "dm": 3, "operations": 1, "housekeeping": 0}
        }
    finally:
        with app.connection_for_write() as conn:
            for queue in settings.CELERY_QUEUES_BY_KIND.values():
                conn.default_channel.queue_purge(queue)
