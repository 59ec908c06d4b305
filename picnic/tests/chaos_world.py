"""The chaos test's world (picnic/tests/test_chaos.py), also what bench/cluster_scale.py
measures: the cluster on one machine (dev/cluster.py) on a PostgreSQL, a Redis with AOF and
a broker of its own, the local X DM API and Responses backend (which record every request),
and the agent the probe makes (picnic/tests/chaos_probe.py)."""

from __future__ import annotations

import json
import secrets
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

from dev import cluster as clusters
from dev import processes
from dev.providers.local_openai import LocalResponsesServer
from dev.providers.local_x import LocalXServer
from dev.testing import ScriptedServer, load_test_env, scrape_metrics
from evm.userops import entry_point_address
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
    # One node each, or (failover mode) a primary and its standbys: FailoverPostgres,
    # ReplicatedRedis, RabbitCluster (a Redis broker is then the cache's group, database 1).
    postgres: clusters.PostgresServer | clusters.FailoverPostgres
    redis: clusters.RedisServer | clusters.ReplicatedRedis
    broker: (
        clusters.RedisServer
        | clusters.RabbitServer
        | clusters.ReplicatedRedis
        | clusters.RabbitCluster
    )
    x_api: LocalXServer
    backend: LocalResponsesServer
    env: dict[str, str]
    broker_kind: str = "redis"
    api_token: str = ""
    mcp_token: str = ""
    action_id: str = ""  # the card action the MCP agent follows
    dm_target: dict = field(default_factory=dict)

    @property
    def followed_uri(self) -> str:
        return f"picnic://action/{self.action_id}"

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
        return scrape_metrics(self.cluster.web_url, METRICS_TOKEN)

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


def fresh_database(postgres: clusters.PostgresServer, env: dict[str, str]) -> None:
    """An empty, migrated `picnic` database: a copy of `picnic_template`, which the first world
    on this server migrates (the worlds after it on the same server skip the migrations)."""
    admin = postgres.url("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'picnic_template'")
        migrated = found.fetchone() is not None
        if not migrated:
            conn.execute("CREATE DATABASE picnic_template")
    if not migrated:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env={**env, "DATABASE_URL": postgres.url("picnic_template")},
            check=True,
        )
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS picnic WITH (FORCE)")
        conn.execute("CREATE DATABASE picnic TEMPLATE picnic_template")


@contextmanager
def world(
    tmp_path: Path,
    broker_kind: str,
    *,
    instances: int = 2,
    postgres: clusters.PostgresServer | clusters.FailoverPostgres | None = None,
    failover: bool = False,
    rabbits: clusters.RabbitCluster | None = None,
) -> Iterator[System]:
    """The cluster (`instances` of each process type) on services of its own, with the agent
    made and its tokens in `System`; everything it started stopped on the way out. A running
    `postgres` may be passed (the chaos test's brokers share one): the world gets a fresh
    database on it. `failover`: no single node (a FailoverPostgres must be passed; Redis under
    Sentinel; three RabbitMQ nodes, or the Redis group's database 1 as the broker). A running
    RabbitMQ cluster may be passed as `rabbits` (the caller started it and stops it)."""
    own_postgres = postgres is None
    postgres = postgres or clusters.PostgresServer()
    if broker_kind == "amqp" and not clusters.RABBITMQ_SERVER.exists():
        pytest.skip(f"RabbitMQ is not installed ({clusters.RABBITMQ_SERVER})")
    if failover:
        redis = clusters.ReplicatedRedis(tmp_path / "redis")
        if broker_kind != "amqp":
            broker = redis
        else:
            broker = rabbits or clusters.RabbitCluster(tmp_path / "broker")
    else:
        redis = clusters.RedisServer(tmp_path / "redis")
        if broker_kind == "amqp":  # a node of its own: quorum queues, restarted on its own
            broker = clusters.RabbitServer(tmp_path / "broker")
        else:  # a Redis of its own with AOF, restarted on its own
            broker = clusters.RedisServer(tmp_path / "broker")
    rabbit = isinstance(broker, clusters.RabbitServer | clusters.RabbitCluster)
    started: list = []
    try:
        if broker is rabbits:
            pass  # running already
        elif rabbit:
            started.append(broker.launch())  # its boot overlaps initdb and the migrations
        elif broker is not redis:
            started.append(broker.start())
        for service in (postgres, redis) if own_postgres else (redis,):
            started.append(service.start())
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
            broker_url = broker.url(1) if broker is redis else broker.url()
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
                "DATABASE_URL": postgres.url("picnic"),
                "CELERY_BROKER_URL": broker_url,
                "REDIS_SENTINEL_MASTER": clusters.ReplicatedRedis.MASTER,
                "CACHE_URL": redis.url(),
                "EVENTS_URL": redis.url(),
                "CELERY_QUEUE_PREFIX": PREFIX,
                "PUBLIC_BASE_URL": f"http://127.0.0.1:{web_port}",
                "CHAIN_ID": str(CHAIN_ID),
                "ENTRY_POINT_VERSION": "0.7",
                "CHAIN_RPC_URL": chain.url,
                "BUNDLER_RPC_URL": chain.url,
                "HEALTH_CHECK_TIMEOUT_SECONDS": "1",
                "BEAT_LOCK_RETRY_SECONDS": "1",
                "PYTHONUNBUFFERED": "1",
            }
            fresh_database(postgres, env)
            if rabbit and broker is not rabbits:
                broker.wait()
            # Workers on the production pool (prefork), one child each: a solo worker runs its
            # task inside its event loop, and a task read by the loop's own follow-up read
            # leaves its ack queued until the next poll returns, so with its prefetch spent
            # the worker sat idle up to 10 s (its next timer) while messages waited (the
            # RabbitMQ run's slow dm consumption; docs/deploy.md, "RabbitMQ").
            cluster = clusters.Cluster(
                env, tmp_path / "cluster", web_port=web_port, mcp_port=mcp_port,
                queue_prefix=PREFIX, instances=instances, worker_concurrency=1,
            )  # fmt: skip
            system = System(
                cluster, postgres, redis, broker, x_api, backend, cluster.env, broker_kind
            )
            ids = system.probe("setup")
            system.api_token, system.mcp_token = ids["api_token"], ids["mcp_token"]
            system.action_id = ids["action_id"]
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
