"""The production process model: the ASGI app under the real gunicorn with
uvicorn workers, static files from WhiteNoise, task routing by queue kind, exactly one beat."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from kombu import Connection

from chain.stack import free_port
from dev import processes
from dev.testing import database_url, start_celery_worker, stop_celery_worker, wait_until
from picnic.beat import FileBeatLock, beat_lock_key

ROOT = Path(__file__).resolve().parents[2]

# What each task is for decides its queue (README, "Deployment").
EXPECTED_QUEUES = {
    "actions.tasks.action_submit": "chain",
    "actions.tasks.action_reconcile": "chain",
    "actions.tasks.actions_reconcile_pending": "chain",
    "actions.tasks.actions_expire_overdue": "chain",
    "actions.tasks.bridges_reconcile_pending": "chain",
    "actions.tasks.account_change_submit": "chain",
    "actions.tasks.account_changes_process": "chain",
    "actions.tasks.spend_permissions_sweep": "chain",
    "messaging.tasks.delivery_deliver": "dm",
    "messaging.tasks.deliveries_process_due": "dm",
    "operations.tasks.operation_dispatch": "operations",
    "operations.tasks.operations_process_due": "operations",
    "actions.tasks.actions_purge_retained": "housekeeping",
    "actions.tasks.card_purchases_sync_signed_in": "housekeeping",
    "messaging.tasks.deliveries_reap_leases": "housekeeping",
    "operations.tasks.operations_expire_details": "housekeeping",
    "mcp_adapter.tasks.tasks_purge_expired": "housekeeping",
    "oauth.tasks.client_logo_fetch": "fetch",
}


def _environ(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        **extra,
    }


def _celery_routes(**env: str) -> dict:
    """Where Celery itself (a fresh process, settings from the environment) routes each
    registered task and each beat entry."""
    code = (
        "import json, django; django.setup(); from picnic.celery import app; app.loader.import_default_modules(); "
        "names = sorted(n for n in app.tasks if not n.startswith('celery.')); "
        "beat = sorted({e['task'] for e in app.conf.beat_schedule.values()}); "
        "route = lambda n: app.amqp.router.route({}, n)['queue'].name; "
        "print(json.dumps({'tasks': {n: route(n) for n in names}, 'beat': {n: route(n) for n in beat}}))"
    )
    environ = {**os.environ, **env}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_every_task_and_every_beat_entry_is_routed_to_its_kind_of_queue():
    # Unset (or empty) CELERY_QUEUE_PREFIX: the deployment's prefix, "picnic" by default.
    routes = _celery_routes(CELERY_QUEUE_PREFIX="", DEPLOYMENT_PREFIX="")
    expected = {name: f"picnic.{q}" for name, q in EXPECTED_QUEUES.items()}
    assert routes["tasks"] == expected
    assert set(routes["beat"]) <= set(expected)
    assert {name: routes["beat"][name] for name in routes["beat"]} == {
        name: expected[name] for name in routes["beat"]
    }


def test_the_queues_carry_the_deployment_prefix():
    routes = _celery_routes(CELERY_QUEUE_PREFIX="", DEPLOYMENT_PREFIX="blue")
    assert routes["tasks"] == {name: f"blue.{q}" for name, q in EXPECTED_QUEUES.items()}


def test_a_queue_prefix_keeps_two_systems_on_one_broker_apart():
    routes = _celery_routes(CELERY_QUEUE_PREFIX="soak-1.")
    assert routes["tasks"] == {name: f"soak-1.{q}" for name, q in EXPECTED_QUEUES.items()}


def test_a_bad_queue_prefix_stops_start_up():
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "picnic.settings",
            "CELERY_QUEUE_PREFIX": "a b",
        },
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0 and "CELERY_QUEUE_PREFIX" in result.stderr


def test_on_rabbitmq_every_queue_is_a_quorum_queue_with_a_delivery_limit(rabbitmq_url):
    # A fresh process on an amqp:// broker publishes one task of each kind of queue (confirmed
    # by the broker before send_task returns); the broker then holds each queue as declared.
    vhost = rabbitmq_url.rsplit("/", 1)[1]
    tasks = ["actions.tasks.actions_expire_overdue", "messaging.tasks.deliveries_process_due"]
    tasks += ["operations.tasks.operations_process_due", "actions.tasks.actions_purge_retained"]
    code = (
        "import django; django.setup(); from picnic.celery import app; "
        f"[app.send_task(n) for n in {tasks!r}]"
    )
    environ = _environ(CELERY_BROKER_URL=rabbitmq_url, CELERY_QUEUE_PREFIX="q-test.")
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    listing = subprocess.run(
        ["rabbitmqctl", "list_queues", "-q", "-p", vhost, "name", "type", "arguments"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in listing.splitlines() if line}
    for kind in ("chain", "dm", "operations", "housekeeping"):
        queue_type, arguments = rows[f"q-test.{kind}"]
        assert queue_type == "quorum"
        # The count from the queue's leader (list_queues' column lags behind for quorum queues).
        with Connection(rabbitmq_url) as conn:
            declared = conn.default_channel.queue_declare(queue=f"q-test.{kind}", passive=True)
        assert declared.message_count == 1
        assert '{"x-delivery-limit",5}' in arguments
        assert '{"x-dead-letter-routing-key","q-test.dead"}' in arguments


def _inspect_ping(prefix: str) -> set[str]:
    """The workers that answer `celery inspect ping` run from a deployment of this prefix."""
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "picnic", "inspect", "ping", "-t", "3", "-j"],
        cwd=ROOT,
        env={**_environ(), "CELERY_QUEUE_PREFIX": prefix},
        capture_output=True,
        text=True,
        timeout=120,
    )
    # No reply: celery prints an error and exits non-zero; else one JSON object of replies.
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    return set(json.loads(lines[-1])) if lines else set()


def test_celery_control_reaches_only_the_workers_of_its_own_deployment(tmp_path):
    # Two deployments on one Redis: their queues were apart, but `celery inspect` from one
    # reached the other's workers over the shared control exchange.
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("needs the Redis broker (CELERY_BROKER_URL=redis://…)")
    tag = uuid.uuid4().hex[:8]
    blue, green = f"blue-{tag}.", f"green-{tag}."
    env = {"CELERY_QUEUE_PREFIX": blue}
    worker = start_celery_worker(queue=f"{blue}chain", log_path=tmp_path / "w.log", env=env)
    try:
        wait_until(lambda: " ready." in (tmp_path / "w.log").read_text(), timeout=60)
        assert len(_inspect_ping(blue)) == 1
        assert _inspect_ping(green) == set()
    finally:
        stop_celery_worker(worker)


def test_tests_send_every_task_to_their_own_queue(celery_test_queue):
    from picnic.celery import app

    for name in EXPECTED_QUEUES:
        assert app.amqp.router.route({}, name)["queue"].name == celery_test_queue


# --- the web process: gunicorn + uvicorn workers serving picnic.asgi ------------------------


@pytest.fixture
def production_env(tmp_path) -> dict[str, str]:
    """A production-like environment (DEBUG off, a key, collected static files) on this
    machine's test database and broker."""
    env = _environ(
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        SPEND_PERMISSION_KEYS=Fernet.generate_key().decode(),
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
        PICNIC_VAR_DIR=str(tmp_path / "var"),
    )
    collected = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stderr
    return env


@pytest.mark.django_db(transaction=True)
def test_gunicorn_with_uvicorn_workers_serves_the_app_and_its_static_files(
    production_env, tmp_path
):
    port = free_port()
    web = processes.gunicorn(production_env, tmp_path / "web.log", bind=f"127.0.0.1:{port}")
    web.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: processes.answers(f"{base}/healthz"), timeout=60)
        status, headers, body = processes.http("GET", f"{base}/healthz")
        assert (status, json.loads(body)) == (200, {"status": "ok"})
        # The ASGI worker answers (gunicorn's own sync worker would say "gunicorn").
        assert headers.get("server") == "uvicorn"

        status, _, page = processes.http("GET", f"{base}/accounts/login/")
        assert status == 200 and b"<form" in page
        # The page links the hashed name from the collectstatic manifest; WhiteNoise serves
        # it from the web process itself, compressed and cached for good.
        link = next(
            part.split('"')[0]
            for part in page.decode().split('href="')[1:]
            if part.startswith("/static/picnic/enduser.")
        )
        assert link != "/static/picnic/enduser.css"
        status, headers, css = processes.http(
            "GET", base + link, headers={"Accept-Encoding": "gzip"}
        )
        assert status == 200 and headers.get("Content-Encoding") == "gzip"
        assert "immutable" in headers.get("Cache-Control", "")
        status, *_ = processes.http("GET", f"{base}/static/picnic/nothing-here.css")
        assert status == 404
    finally:
        web.stop()
    assert web.proc.returncode == 0, web.log()[-3000:]


# --- exactly one beat -----------------------------------------------------------------------


def test_the_file_lock_admits_one_beat_at_a_time(tmp_path, settings):
    settings.VAR_DIR = tmp_path
    first, second = FileBeatLock(), FileBeatLock()
    assert first.try_acquire()
    assert not second.try_acquire()
    first.release()
    assert second.try_acquire()
    second.release()


def _holders(key: int) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        # A bigint advisory-lock key shows as classid (high 32 bits) and objid (low 32 bits).
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s AND objsubid = 1",
            [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF],
        )
        return cursor.fetchone()[0]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_beats_one_ticks_and_the_standby_takes_over_when_it_is_killed(tmp_path):
    prefix = f"beat-test-{uuid.uuid4().hex[:8]}."
    env = _environ(CELERY_QUEUE_PREFIX=prefix, BEAT_LOCK_RETRY_SECONDS="0.5")
    beats = [
        processes.celery_beat(env, tmp_path / f"beat-{n}.log", schedule_path=tmp_path / f"s{n}")
        for n in range(2)
    ]
    sent = "Sending due task"
    try:
        beats[0].start()
        wait_until(lambda: sent in beats[0].log(), timeout=60)
        beats[1].start()
        wait_until(lambda: "standing by" in beats[1].log(), timeout=60)
        # The first beat goes on ticking (operations-process-due is due every 3 s) while the
        # second waits: it has sent nothing.
        ticks = beats[0].log().count(sent)
        wait_until(lambda: beats[0].log().count(sent) >= ticks + 3, timeout=60)
        assert sent not in beats[1].log()
        assert _holders(beat_lock_key_for(prefix)) == 1

        beats[0].kill()
        wait_until(lambda: sent in beats[1].log(), timeout=60)
        assert "acquired the beat lock" in beats[1].log()
        assert _holders(beat_lock_key_for(prefix)) == 1
    finally:
        for beat in beats:
            beat.stop()
        _purge_prefixed_queues(prefix)


def beat_lock_key_for(prefix: str) -> int:
    from django.test.utils import override_settings

    with override_settings(CELERY_QUEUE_PREFIX=prefix):
        return beat_lock_key()


def _purge_prefixed_queues(prefix: str) -> None:
    from picnic.celery import app

    with app.connection_for_write() as conn:
        for kind in settings.CELERY_QUEUE_KINDS:
            try:
                conn.default_channel.queue_purge(prefix + kind)
            except Exception:  # noqa: BLE001 - best effort: a queue never declared is fine
                pass


# --- the Procfile and make prod --------------------------------------------------------------


def test_the_procfile_lists_every_process_type_and_make_prod_runs_them_all():
    from dev.management.commands.run_prod import PROCESS_TYPES

    types = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line and not line.startswith("#"):
            name, command = line.split(":", 1)
            types[name] = command.strip()
    assert set(types) == {"release", *PROCESS_TYPES}
    # One worker type per queue kind, each consuming only its own queue.
    # The shell picks the same queue names as the settings: the deployment's prefix unless
    # CELERY_QUEUE_PREFIX says otherwise.
    cases = [
        ({}, "picnic."),
        ({"DEPLOYMENT_PREFIX": "blue"}, "blue."),
        ({"DEPLOYMENT_PREFIX": "blue", "CELERY_QUEUE_PREFIX": "soak-1."}, "soak-1."),
        ({"CELERY_QUEUE_PREFIX": ""}, "picnic."),
    ]
    for kind in settings.CELERY_QUEUE_KINDS:
        queue = re.search(r'-Q ("[^"]+")', types[f"worker_{kind}"]).group(1)
        for env, prefix in cases:
            clean = {k: v for k, v in os.environ.items() if "PREFIX" not in k}
            echoed = subprocess.run(
                ["sh", "-c", f"echo {queue}"], env={**clean, **env}, capture_output=True, text=True
            ).stdout.strip()
            assert echoed == f"{prefix}{kind}", (env, echoed)
    assert "picnic.asgi:application" in types["web"] and "uvicorn" not in types["web"]


def test_make_prod_refuses_debug_and_the_embedded_engines(settings, monkeypatch):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    settings.DEBUG = True
    with pytest.raises(CommandError, match="DJANGO_DEBUG=false"):
        call_command("run_prod")
    # The throttles count in the cache: a per-process one would not hold across processes.
    settings.DEBUG = False
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", "django.db.backends.postgresql")
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    settings.CACHE_URL = "locmem://"
    with pytest.raises(CommandError, match="CACHE_URL=redis"):
        call_command("run_prod")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_make_prod_creates_its_database_when_missing():
    import psycopg

    from dev.management.commands.run_prod import ensure_database

    name = f"picnic_prod_test_{uuid.uuid4().hex[:8]}"
    db = {**settings.DATABASES["default"], "NAME": name}
    try:
        assert ensure_database(db) is True
        assert ensure_database(db) is False
    finally:
        with psycopg.connect(
            host=db["HOST"] or "127.0.0.1",
            port=db["PORT"] or 5432,
            user=db["USER"] or "postgres",
            dbname="postgres",
            autocommit=True,
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


# --- check --deploy in the documented deployment environment -------------------------------


def test_check_deploy_is_clean_in_the_documented_deployment_environment(tmp_path):
    """README "Deployment": the production environment of "Settings" plus what the process
    types read; the web process runs with DATABASE_POOL on (gunicorn_conf sets it)."""
    from picnic.tests.test_settings_security import PRODUCTION

    deployment = {
        **PRODUCTION,
        "DATABASE_URL": "postgres://picnic:db-pw@127.0.0.1:5432/picnic",
        "CELERY_BROKER_URL": "redis://:broker-pw@127.0.0.1:6379/0",
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
        "MCP_HTTP_HOST": "0.0.0.0",
        "MCP_RESOURCE_URL": "https://mcp.picnic.example/mcp",
        "MCP_API_URL": "https://picnic.example",
        "MCP_ALLOWED_ORIGINS": "https://picnic.example",
        "DATABASE_POOL": "true",
        "WEB_CONCURRENCY": "4",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k not in deployment}, **deployment},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout
