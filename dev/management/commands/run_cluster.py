"""`make cluster`: the cluster on one machine (dev/cluster.py) — 2 web, 2 MCP, 2 Celery
workers per queue kind, a beat and a standby beat, HAProxy in front — with DEBUG off on
PostgreSQL, Redis and the broker CELERY_BROKER_URL names (Redis or RabbitMQ), the local
providers and chain stack in place of real ones, as `make prod` starts them.

`--ha` (`make cluster`; `HA=0` leaves it out): no single node either for the stores, which it starts itself on
loopback ports of their own with their data under var/cluster-ha/ (dev/cluster.py): PostgreSQL
as a primary and a standby under pg_auto_failover, Redis as a primary, a replica and three
sentinels, and three RabbitMQ nodes with quorum queues (`--ha-broker redis`: Celery on the
Redis group instead). The processes find the primaries themselves: libpq's multi-host
DATABASE_URL, `sentinel://` URLs, the broker's node list.

Not the default: `make run` is the one-process embedded system; `make prod` one instance of
each process type. Ctrl-C stops everything.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from dev import cluster as clusters
from dev.cluster import HAPROXY, Cluster
from dev.management.commands import run_prod
from picnic.env import database_settings


class Command(run_prod.Command):
    broker_schemes = ("redis://", "rediss://", "sentinel://", "amqp://")
    help = (
        "make cluster: 2 web, 2 MCP, 2 workers per queue kind, 2 beats behind HAProxy "
        "(DEBUG off, PostgreSQL, Redis)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--instances", type=int, default=2, help="of each process type")
        parser.add_argument("--web-port", type=int, default=8000)
        parser.add_argument("--mcp-port", type=int, default=8001)
        parser.add_argument(
            "--ha", action="store_true", help="the stores too: failover for each (var/cluster-ha)"
        )
        parser.add_argument("--ha-broker", choices=("amqp", "redis"), default="amqp")

    def handle(self, *args, instances: int, web_port: int, mcp_port: int, **options):
        if not Path(HAPROXY).exists():
            raise CommandError(f"{HAPROXY} is missing: `make cluster` installs Debian's haproxy")
        self.instances, self.web_port, self.mcp_port = instances, web_port, mcp_port
        if not options.pop("ha"):
            return super().handle(*args, **options)
        broker = options.pop("ha_broker")
        stores = start_stores(Path(settings.VAR_DIR) / "cluster-ha", broker, self.stdout.write)
        try:
            super().handle(*args, **options)
        finally:
            for store in reversed(stores):
                store.stop()
            self.stdout.write("stopped the stores")

    def _run(self, env: dict[str, str]) -> None:
        self._release(env)
        cluster = Cluster(
            env,
            Path(settings.VAR_DIR) / "cluster",
            web_port=self.web_port,
            mcp_port=self.mcp_port,
            instances=self.instances,
            worker_concurrency=2,
            queue_prefix=settings.CELERY_QUEUE_PREFIX,
        )
        done = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: done.set())
        signal.signal(signal.SIGTERM, lambda *_: done.set())
        with cluster:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Picnic cluster (DEBUG off) on {cluster.web_url}/, MCP on {cluster.mcp_url}"
                    f" — logs in {cluster.workdir} — Ctrl-C stops everything"
                )
            )
            done.wait()


def start_stores(workdir: Path, broker: str, say) -> list:
    """PostgreSQL under pg_auto_failover, Redis under Sentinel and (for an amqp broker) three
    RabbitMQ nodes, started afresh in `workdir`; the URLs every process is given are set in
    this process's environment and settings."""
    if not clusters.FailoverPostgres.available():
        raise CommandError("pg_auto_failover is missing: `make deps` installs Debian's")
    shutil.rmtree(workdir, ignore_errors=True)  # a fresh formation each run
    workdir.mkdir(parents=True)
    started = time.monotonic()
    postgres = clusters.FailoverPostgres(workdir / "postgres")
    redis = clusters.ReplicatedRedis(workdir / "redis")
    rabbits = clusters.RabbitCluster(workdir / "rabbitmq") if broker == "amqp" else None
    stores: list = []
    try:
        if rabbits is not None:
            stores.append(rabbits.launch())  # its VMs boot while PostgreSQL is set up
        stores.append(postgres.start())
        stores.append(redis.start())
        if rabbits is not None:
            rabbits.wait()
    except BaseException:
        for store in reversed(stores):
            store.stop()
        raise
    urls = {
        "DATABASE_URL": postgres.url(),
        "CACHE_URL": redis.url(0),
        "EVENTS_URL": redis.url(0),
        "CELERY_BROKER_URL": rabbits.url() if rabbits is not None else redis.url(1),
        "REDIS_SENTINEL_MASTER": redis.MASTER,
    }
    os.environ.update(urls)
    settings.DATABASES["default"] = database_settings("DATABASE_URL", urls["DATABASE_URL"])
    for name in ("CACHE_URL", "EVENTS_URL", "CELERY_BROKER_URL"):
        setattr(settings, name, urls[name])
    say(f"stores with failover up in {time.monotonic() - started:.1f}s (in {workdir}):")
    for name, url in urls.items():
        say(f"  {name}={url}")
    return stores
