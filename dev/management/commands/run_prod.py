"""`make prod`: the production process types of the Procfile on this machine, with DEBUG off,
against PostgreSQL and Redis, stopped together by Ctrl-C.

The providers and the chain are external in production; here they are the local ones, started
in this process on free loopback ports (like `make run`) and handed to every process through
the environment. Then the release step (migrate, collectstatic) and `honcho start` with the
Procfile's long-running types: web (gunicorn + uvicorn workers), mcp, one worker per queue
kind, beat. Nothing here is in the Procfile: a deployment has real providers.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from psycopg import sql

from chain.stack import ChainStackError, LocalWorld, free_port
from core import metrics, stores
from dev.demo.messaging import DEMO_TOKEN_DEFAULT, DEMO_TOKEN_ENV
from dev.providers.local_coingecko import LocalCoinGeckoServer
from dev.providers.local_gnosis_pay import LocalGnosisPayServer
from dev.providers.local_lifi import LocalLifiServer
from dev.providers.local_openai import LocalResponsesServer
from dev.providers.local_ramps import demo_servers as ramp_servers
from dev.providers.local_x import LocalXServer

ROOT = Path(settings.BASE_DIR)
# The Procfile's long-running types (`release` runs first, once).
PROCESS_TYPES = (
    "web",
    "mcp",
    "worker_chain",
    "worker_dm",
    "worker_operations",
    "worker_housekeeping",
    "worker_fetch",
    "beat",
)


def ensure_database(db: dict | None = None) -> bool:
    """Create the PostgreSQL database DATABASE_URL names if it is missing; True if created."""

    db = db or settings.DATABASES["default"]
    params = {
        "host": db["HOST"] or "127.0.0.1",
        "port": db["PORT"] or 5432,
        "user": db["USER"] or "postgres",
        "password": db["PASSWORD"] or None,
        "dbname": "postgres",
    }
    with psycopg.connect(**params, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]])
        if exists.fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))
    return True


class Command(BaseCommand):
    help = "make prod: the Procfile's process types with DEBUG off on PostgreSQL and Redis."
    # The brokers this command runs on (run_cluster adds RabbitMQ).
    broker_schemes: tuple[str, ...] = ("redis://", "rediss://")

    def handle(self, *args, **options):
        if settings.DEBUG:
            raise CommandError("make prod runs with DJANGO_DEBUG=false")
        if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
            raise CommandError("make prod needs DATABASE_URL=postgres://…")
        if not settings.CELERY_BROKER_URL.startswith(self.broker_schemes):
            raise CommandError(f"{self.help.split(':')[0]} needs CELERY_BROKER_URL=redis://…")
        if not stores.is_redis(settings.CACHE_URL):
            # The login, token, registration and metadata-fetch throttles count there: on a
            # per-process cache each web process would grant the whole budget again.
            raise CommandError("make prod needs CACHE_URL=redis://…")
        if ensure_database():
            self.stdout.write(f"created database {settings.DATABASES['default']['NAME']}")

        services = []
        env = dict(os.environ)
        # The processes are production's: they run without the dev app (this command's own).
        env.pop("PICNIC_DEV_APPS", None)
        # Both local chains (the card's and the L2-like one) on free ports; the processes find
        # them through the default chain table's URL variables.
        world = LocalWorld.on_ports(
            card_rpc_port=free_port(),
            card_bundler_port=free_port(),
            l2_rpc_port=free_port(),
            l2_bundler_port=free_port(),
            workdir=ROOT / "var" / "prod-chain",
        )
        chain = world.card
        try:
            started = time.monotonic()
            world.start()
            self.stdout.write(f"local chain stack up in {time.monotonic() - started:.1f}s")
            env.update(
                CHAIN_ID=str(world.card.chain_id),
                CHAIN_RPC_URL=world.card.rpc_url,
                BUNDLER_RPC_URL=world.card.bundler_url,
                L2_CHAIN_ID=str(world.l2.chain_id),
                L2_CHAIN_RPC_URL=world.l2.rpc_url,
                L2_BUNDLER_RPC_URL=world.l2.bundler_url,
            )
            env.setdefault(DEMO_TOKEN_ENV, DEMO_TOKEN_DEFAULT)
            local = {
                "X_API_BASE_URL": LocalXServer(token=env[DEMO_TOKEN_ENV]),
                "OPERATIONS_BACKEND_URL": LocalResponsesServer(
                    api_key=settings.OPERATIONS_BACKEND_API_KEY, work_seconds=5
                ),
                "SWAP_QUOTE_URL": LocalLifiServer(
                    rpc_urls={local.chain_id: local.rpc_url for local in world.chains},
                    bridge_delay=5.0,
                ),
                "GNOSIS_PAY_URL": LocalGnosisPayServer(rpc_url=chain.rpc_url),
                "PRICE_API_URL": LocalCoinGeckoServer(),
            }
            for name, server in local.items():
                services.append(server.start())
                env[name] = server.url
            monerium, avenia = ramp_servers(free_port(), free_port())
            services += [monerium, avenia]
            env.update(MONERIUM_URL=monerium.url, AVENIA_URL=avenia.url)
            for name in (*local, "MONERIUM_URL", "AVENIA_URL"):
                self.stdout.write(f"local {name} {env[name]}")
            self._run(env)
        except ChainStackError as exc:
            raise CommandError(f"the local chain stack did not come up: {exc}") from exc
        finally:
            for server in services:
                server.stop()
            world.stop()
            self.stdout.write("stopped the local providers and the chain stack")

    def _release(self, env: dict[str, str]) -> None:
        """The environment every process shares, then the release step (migrate,
        collectstatic)."""
        python = sys.executable
        # The Procfile names gunicorn, celery and python: this venv's.
        env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"
        env.setdefault("PYTHONUNBUFFERED", "1")
        # Every process writes its metrics into one directory that a scrape of any web worker
        # sums; emptied first so a previous run's files (and reused pids) are not counted.
        env.setdefault(metrics.MULTIPROC_ENV, str(Path(settings.VAR_DIR) / "prometheus"))
        os.environ[metrics.MULTIPROC_ENV] = env[metrics.MULTIPROC_ENV]
        metrics.clear_multiprocess_dir()
        # /metrics answers only with a token: a fresh one per run unless METRICS_TOKEN is set.
        env.setdefault("METRICS_TOKEN", secrets.token_urlsafe(24))
        for step in (["migrate", "--noinput"], ["collectstatic", "--noinput", "-v", "0"]):
            subprocess.run([python, "manage.py", *step], cwd=ROOT, env=env, check=True)

    def _run(self, env: dict[str, str]) -> None:
        python = sys.executable
        self._release(env)
        web = env.get("WEB_BIND") or f"127.0.0.1:{env.get('PORT', '8000')}"
        # honcho hands each type its own PORT: name the web's bind and the MCP API explicitly.
        env.update(WEB_BIND=web, MCP_API_URL=env.get("MCP_API_URL") or f"http://{web}")
        honcho = subprocess.Popen(
            [python, "-m", "honcho", "start", "-f", str(ROOT / "Procfile"), *PROCESS_TYPES],
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"Picnic (DEBUG off) on http://{web}/, MCP on {settings.MCP_RESOURCE_URL} "
                "— Ctrl-C stops everything"
            )
        )
        self.stdout.write(
            f"metrics: curl -H 'Authorization: Bearer {env['METRICS_TOKEN']}' http://{web}/metrics"
        )

        def stop(*_: object) -> None:
            if honcho.poll() is None:
                honcho.send_signal(signal.SIGTERM)  # honcho stops every process it started

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            honcho.wait()
        finally:
            if honcho.poll() is None:
                stop()
                try:
                    honcho.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    os.killpg(honcho.pid, signal.SIGKILL)
