"""`make cluster`: the cluster on one machine (dev/cluster.py) — 2 web, 2 MCP, 2 Celery
workers per queue kind, a beat and a standby beat, HAProxy in front — with DEBUG off on
PostgreSQL, Redis and the broker CELERY_BROKER_URL names (Redis or RabbitMQ), the local
providers and chain stack in place of real ones, as `make prod` starts them.

Not the default: `make run` is the one-process embedded system; `make prod` one instance of
each process type. Ctrl-C stops everything.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from dev.cluster import HAPROXY, Cluster
from dev.management.commands import run_prod


class Command(run_prod.Command):
    broker_schemes = ("redis://", "rediss://", "amqp://")
    help = (
        "make cluster: 2 web, 2 MCP, 2 workers per queue kind, 2 beats behind HAProxy "
        "(DEBUG off, PostgreSQL, Redis)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--instances", type=int, default=2, help="of each process type")
        parser.add_argument("--web-port", type=int, default=8000)
        parser.add_argument("--mcp-port", type=int, default=8001)

    def handle(self, *args, instances: int, web_port: int, mcp_port: int, **options):
        if not Path(HAPROXY).exists():
            raise CommandError(f"{HAPROXY} is missing: `make cluster` installs Debian's haproxy")
        self.instances, self.web_port, self.mcp_port = instances, web_port, mcp_port
        super().handle(*args, **options)

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
