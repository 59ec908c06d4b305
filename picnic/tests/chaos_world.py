"""The chaos test's world (picnic/tests/test_chaos.py), also what bench/cluster_scale.py
measures: the cluster on one machine (picnic/cluster.py) on a PostgreSQL, a Redis with AOF and
a broker of its own, the local X DM API and Responses backend (which record every request),
and the agent the probe makes (picnic/tests/chaos_probe.py)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from cryptography.fernet import Fernet
from prometheus_client.parser import text_string_to_metric_families

from core.testing import ScriptedServer
from evm.userops import entry_point_address
from messaging.providers.local_x import LocalXServer
from operations.backends.local_openai import LocalResponsesServer
from picnic import cluster as clusters
from picnic import processes
from picnic.tests.chaos_probe import X_TOKEN_ENV

ROOT = Path(__file__).resolve().parents[2]
X_TOKEN = "chaos-x-token"
BACKEND_KEY = "chaos-backend-key"
METRICS_TOKEN = secrets.token_urlsafe(24)
PREFIX = "chaos."
CHAIN_ID = 31337


@dataclass
class System:
    cluster: clusters.Cluster
    postgres: clusters.PostgresServer
    redis: clusters.RedisServer
    broker: clusters.RedisServer | RabbitVhost
    x_api: LocalXServer
    backend: LocalResponsesServer
    env: dict[str, str]
    api_token: str = ""
    mcp_token: str = ""
    dm_target: dict = field(default_factory=dict)

    @property
    def dm_account(self) -> dict:
        return {k: self.dm_target[k] for k in ("workspace_id", "social_account_id")}

    def probe(self, command: str, stdin: dict | None = None) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "picnic.tests.chaos_probe", command],
            cwd=ROOT,
            env=self.env,
            input=json.dumps(stdin or {}),
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    def metrics(self) -> dict[tuple[str, tuple], float]:
        status, _, body = processes.http(
            "GET", f"{self.cluster.web_url}/metrics", token=METRICS_TOKEN, timeout=30
        )
        assert status == 200, status
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
        }

    def fresh_dm_sent(self) -> bool:
        """One new DM through HAProxy, accepted and delivered to the provider."""
        text = f"probe {uuid.uuid4()}"
        key = str(uuid.uuid4())
        body = {**self.dm_target, "text": text, "idempotency_key": key}
        try:
            status, _, _ = processes.http(
                "POST",
                f"{self.cluster.web_url}/private-messaging-api/actions/send",
                body=body,
                token=self.api_token,
                headers={"Idempotency-Key": key},
                timeout=10,
            )
        except OSError:
            return False
        if status != 202:
            return False
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(r["text"] == text for r in self.x_api.requests):
                return True
            time.sleep(0.1)
        return False

    def state(self) -> dict:
        """What is not back yet (for a failure's message)."""
        cluster = self.cluster
        return {
            "not ready": [m.name for m in cluster.members.values() if not m.ready()],
            "web up": sorted(cluster.servers_up("web")),
            "mcp up": sorted(cluster.servers_up("mcp")),
            "beat holder": cluster.beat_holder(),
            "restarts": cluster.restarts[-5:],
        }

    def serving(self) -> bool:
        cluster = self.cluster
        members = cluster.members.values()
        return (
            all(m.ready() for m in members)
            and len(cluster.servers_up("web")) == sum(m.kind == "web" for m in members)
            and len(cluster.servers_up("mcp")) == sum(m.kind == "mcp" for m in members)
            and cluster.beat_holder() is not None
        )


def create_database(postgres: clusters.PostgresServer) -> None:
    with psycopg.connect(postgres.url("postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE picnic")


class RabbitVhost:
    """Celery on the machine's RabbitMQ, in a vhost of this test's own (quorum queues). The
    node is shared with other tests, so it is not restarted: the broker fault cuts every
    connection of the vhost (what a node restart does to its clients) instead."""

    def __init__(self) -> None:
        self.vhost = f"chaos-{uuid.uuid4().hex[:8]}"

    def _ctl(self, *args: str) -> str:
        return subprocess.run(
            ["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60
        ).stdout

    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:5672/{self.vhost}"

    def start(self) -> RabbitVhost:
        if shutil.which("rabbitmqctl") is None or not clusters.port_open(5672):
            pytest.skip("RabbitMQ is not running on 127.0.0.1:5672")
        self._ctl("add_vhost", self.vhost)
        self._ctl("set_permissions", "-p", self.vhost, "guest", ".*", ".*", ".*")
        return self

    def restart(self) -> None:
        for line in self._ctl("list_connections", "vhost", "pid").splitlines():
            vhost, _, pid = line.partition("\t")
            if vhost == self.vhost:
                self._ctl("close_connection", pid.strip(), "chaos: broker restart")

    def stop(self) -> None:
        self._ctl("delete_vhost", self.vhost)


@contextmanager
def world(tmp_path: Path, broker_kind: str, *, instances: int = 2) -> Iterator[System]:
    """The cluster (`instances` of each process type) on services of its own, with the agent
    made and its tokens in `System`; everything stopped on the way out."""
    postgres = clusters.PostgresServer()
    redis = clusters.RedisServer(tmp_path / "redis")
    if broker_kind == "amqp":
        broker = RabbitVhost()
    else:  # a Redis of its own with AOF, restarted on its own
        broker = clusters.RedisServer(tmp_path / "broker")
    started: list = []
    try:
        for service in (postgres, redis, broker):
            started.append(service.start())
        create_database(postgres)
        with (
            # A send takes a moment, so a kill is likely to catch one in flight.
            LocalXServer(token=X_TOKEN, work_seconds=0.1) as x_api,
            LocalResponsesServer(api_key=BACKEND_KEY, work_seconds=0.5) as backend,
            # The card's chain is not under test here, but /readyz (HAProxy's health check)
            # needs its node and bundler: a scripted one answers their readiness calls.
            ScriptedServer() as chain,
        ):
            chain.results = {
                "eth_chainId": hex(CHAIN_ID),
                "eth_supportedEntryPoints": [entry_point_address("0.7")],
            }
            web_port, mcp_port = clusters.free_port(), clusters.free_port()
            env = {
                **os.environ,
                "DATABASE_URL": postgres.url(),
                "CELERY_BROKER_URL": broker.url(),
                "CACHE_URL": redis.url(),
                "EVENTS_URL": redis.url(),
                "CELERY_QUEUE_PREFIX": PREFIX,
                "DJANGO_DEBUG": "false",
                "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
                "SPEND_PERMISSION_KEYS": Fernet.generate_key().decode(),
                "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
                "DJANGO_STATIC_MANIFEST": "false",  # the APIs only: no collectstatic needed
                "PUBLIC_BASE_URL": f"http://127.0.0.1:{web_port}",
                "PICNIC_VAR_DIR": str(tmp_path / "var"),
                "X_API_BASE_URL": x_api.url,
                X_TOKEN_ENV: X_TOKEN,
                "DM_PROVIDER_TIMEOUT_SECONDS": "3",
                "DM_LEASE_SECONDS": "6",
                "DM_RETRY_BACKOFF_SECONDS": "1",
                "OPERATIONS_BACKEND_URL": backend.url,
                "OPERATIONS_BACKEND_API_KEY": BACKEND_KEY,
                "OPERATIONS_BACKEND_TIMEOUT_SECONDS": "3",
                "OPERATIONS_POLL_SECONDS": "1",
                "CHAIN_ID": str(CHAIN_ID),
                "ENTRY_POINT_VERSION": "0.7",
                "CHAIN_RPC_URL": chain.url,
                "BUNDLER_RPC_URL": chain.url,
                "HEALTH_CHECK_TIMEOUT_SECONDS": "1",
                "BEAT_LOCK_RETRY_SECONDS": "1",
                "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "prometheus"),
                "METRICS_TOKEN": METRICS_TOKEN,
                "PYTHONUNBUFFERED": "1",
            }
            (tmp_path / "prometheus").mkdir()
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=ROOT,
                env=env,
                check=True,
            )
            cluster = clusters.Cluster(
                env, tmp_path / "cluster", web_port=web_port, mcp_port=mcp_port,
                queue_prefix=PREFIX, instances=instances,
            )  # fmt: skip
            system = System(cluster, postgres, redis, broker, x_api, backend, cluster.env)
            ids = system.probe("setup")
            system.api_token, system.mcp_token = ids["api_token"], ids["mcp_token"]
            system.dm_target = {
                "workspace_id": ids["workspace_id"],
                "social_account_id": ids["social_account_id"],
                "recipient_id": "1234567890",
            }
            with cluster:
                yield system
    finally:
        for service in reversed(started):
            service.stop()
