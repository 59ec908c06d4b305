"""`make run`: the whole system on embedded defaults, stopped together by Ctrl-C.

migrate → local chain stack (both chains: the card's and the L2-like one) → seed_demo → Celery
worker with beat → web server (uvicorn on picnic.asgi, so the live pages stream) → MCP server.
The terminal shows one line per step and ends with the URLs and demo logins once everything
answers; the processes' logs (migrations, demo data, web, worker, beat, MCP) go to
var/log/run_local.log.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from chain.stack import CARD_CHAIN_ID, L2_CHAIN_ID, ChainStackError, LocalWorld
from core import chains
from dev.demo.messaging import DEMO_TOKEN_DEFAULT, DEMO_TOKEN_ENV
from dev.management.commands.seed_demo import demo_logins, demo_token
from dev.providers.local_coingecko import LocalCoinGeckoServer
from dev.providers.local_gnosis_pay import LocalGnosisPayServer
from dev.providers.local_lifi import LocalLifiServer
from dev.providers.local_openai import LocalResponsesServer
from dev.providers.local_ramps import demo_servers as ramp_servers
from dev.providers.local_x import LocalXServer

WORKER_READY = re.compile(r"celery@\S+ ready\.")


def _port(url: str, name: str) -> int:
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        raise CommandError(f"{name}={url}: run_local starts the chain stack on 127.0.0.1 only")
    return parts.port or 80


def _local_world() -> LocalWorld:
    """The two local chains on the ports settings.CHAINS names for them."""
    ports = {}
    for chain_id in (CARD_CHAIN_ID, L2_CHAIN_ID):
        try:
            row = chains.get_chain(chain_id)
        except chains.UnknownChain:
            raise CommandError(
                f"run_local starts the local chains {CARD_CHAIN_ID} and {L2_CHAIN_ID}: "
                f"CHAINS names no chain {chain_id}"
            ) from None
        if not row.bundler_url:
            raise CommandError(f"CHAINS: the local chain {chain_id} needs a bundler_url")
        ports[chain_id] = (
            _port(row.rpc_url, f"the RPC URL of chain {chain_id}"),
            _port(row.bundler_url, f"the bundler URL of chain {chain_id}"),
        )
    if settings.CARD_CHAIN_ID != CARD_CHAIN_ID:
        raise CommandError(f"run_local's card lives on chain {CARD_CHAIN_ID} (CARD_CHAIN_ID)")
    return LocalWorld.on_ports(
        card_rpc_port=ports[CARD_CHAIN_ID][0],
        card_bundler_port=ports[CARD_CHAIN_ID][1],
        l2_rpc_port=ports[L2_CHAIN_ID][0],
        l2_bundler_port=ports[L2_CHAIN_ID][1],
    )


def _log_to(log) -> None:
    """This process's log lines (seed_demo's transitions, the local providers) go to the log
    file too, so nothing scrolls the start-up summary away."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            handler.setStream(log)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _listens(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=2):
            return True
    except OSError:
        return False


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class Command(BaseCommand):
    help = "Run web server, Celery worker + beat and the local chain stack until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--addr", default="127.0.0.1:8000")

    def handle(self, *args, addr: str, **options):
        if not addr.startswith(("127.0.0.1:", "localhost:")):
            raise CommandError("run_local binds the web server to 127.0.0.1 only")
        if not settings.DEBUG:
            # It seeds demo users with known passwords: a development setup only.
            raise CommandError(
                "run_local is the embedded development setup: run it with DJANGO_DEBUG=true "
                "(make run does)"
            )
        log_path = Path(settings.VAR_DIR) / "log" / "run_local.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = log_path.open("w", buffering=1)  # line-buffered: the readiness check reads it
        self.stdout.write(f"logs of every process: {log_path} (tail -f it in another terminal)")
        _log_to(log)
        call_command("migrate", interactive=False, verbosity=1, stdout=log)
        self.stdout.write(f"database migrated ({settings.DATABASES['default']['NAME']})")
        world = _local_world()
        started = time.monotonic()
        try:
            world.start()
        except ChainStackError as exc:
            raise CommandError(f"the local chain stack did not come up: {exc}") from exc
        self.stdout.write(f"chain stack up in {time.monotonic() - started:.1f}s")
        for local in world.chains:
            self.stdout.write(
                f"  {chains.chain_name(local.chain_id)} ({local.chain_id}): "
                f"node {local.rpc_url}, bundler {local.bundler_url}"
            )
        chain = world.card
        # The local X DM API for demo deliveries; the worker reads the token by reference.
        os.environ.setdefault(DEMO_TOKEN_ENV, DEMO_TOKEN_DEFAULT)
        x_api = LocalXServer(
            port=_port(settings.X_API_BASE_URL, "X_API_BASE_URL"), token=os.environ[DEMO_TOKEN_ENV]
        ).start()
        self.stdout.write(f"local X DM API on {x_api.url}")
        backend = LocalResponsesServer(
            port=_port(settings.OPERATIONS_BACKEND_URL, "OPERATIONS_BACKEND_URL"),
            api_key=settings.OPERATIONS_BACKEND_API_KEY,
            work_seconds=5,
        ).start()
        self.stdout.write(f"local Responses API (tool backend) on {backend.url}")
        # Quotes on either chain and a bridge between them (its relayer delivers after 5 s).
        quotes = LocalLifiServer(
            port=_port(settings.SWAP_QUOTE_URL, "SWAP_QUOTE_URL"),
            rpc_urls={local.chain_id: local.rpc_url for local in world.chains},
            bridge_delay=5.0,
        ).start()
        self.stdout.write(f"local swap quotes and bridge (LI.FI shape) on {quotes.url}")
        gnosis_pay = LocalGnosisPayServer(
            rpc_url=chain.rpc_url, port=_port(settings.GNOSIS_PAY_URL, "GNOSIS_PAY_URL")
        ).start()
        self.stdout.write(f"local Gnosis Pay API on {gnosis_pay.url}")
        price_server = LocalCoinGeckoServer(
            port=_port(settings.PRICE_API_URL, "PRICE_API_URL")
        ).start()
        self.stdout.write(f"local prices (CoinGecko shape) on {price_server.url}")
        monerium, avenia = ramp_servers(
            _port(settings.MONERIUM_URL, "MONERIUM_URL"), _port(settings.AVENIA_URL, "AVENIA_URL")
        )
        self.stdout.write(f"local ramps: Monerium on {monerium.url}, Avenia on {avenia.url}")
        children: list[subprocess.Popen] = []
        stopping = False

        def stop(*_: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        # /metrics answers only with a token: a fresh one per run unless METRICS_TOKEN is set.
        os.environ.setdefault("METRICS_TOKEN", secrets.token_urlsafe(24))
        try:
            call_command("seed_demo", stdout=log)
            self.stdout.write("demo data ready (users, DMs, operations, actions on the dev chain)")
            python = sys.executable
            # Celery warns against a worker running as root (uid 0, as in a container); this
            # demo worker accepts JSON only (no pickle), the case Celery lets through.
            # (-W matches the message: a category outside the standard library cannot be named
            # there, the interpreter parses -W before site-packages can be imported.)
            quiet_root = ["-W", "ignore:You're running the worker with superuser privileges"]
            if os.geteuid() == 0:
                self.stdout.write(
                    "running as root: Celery's superuser warning is silenced for this dev worker "
                    "(JSON only); run production workers as an unprivileged user"
                )
            children.append(
                subprocess.Popen(
                    [
                        python,
                        *(quiet_root if os.geteuid() == 0 else []),
                        "-m",
                        "celery",
                        "-A",
                        "picnic",
                        "worker",
                        "--beat",
                        "-l",
                        "info",
                        "--concurrency",
                        "2",
                        # One worker for every kind of work (production splits them: Procfile).
                        "-Q",
                        ",".join(settings.CELERY_QUEUES_BY_KIND.values()),
                    ],
                    start_new_session=True,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            host, _, port = addr.rpartition(":")
            # The ASGI entry point under uvicorn (not runserver, which is WSGI): the live pages'
            # event streams need it. Static files come from WhiteNoise, as in production.
            children.append(
                subprocess.Popen(
                    [
                        python,
                        "-m",
                        "uvicorn",
                        "picnic.asgi:application",
                        "--host",
                        host,
                        "--port",
                        port,
                        "--no-access-log",  # the app writes its own (core.middleware)
                        # Django's ASGI handler has no lifespan events: saying so spares
                        # uvicorn's "lifespan unsupported" probe and its message.
                        "--lifespan",
                        "off",
                    ],
                    start_new_session=True,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            children.append(
                subprocess.Popen(
                    [python, "manage.py", "mcp", "--transport", "http"],
                    start_new_session=True,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            self.stdout.write("starting the web server, the worker with beat and the MCP server")

            def exited() -> bool:
                for child in children:
                    if child.poll() is not None:
                        self.stderr.write(
                            f"{' '.join(child.args[1:5])} exited with {child.returncode}; "
                            f"stopping. The end of {log_path}:\n{_tail(log_path)}"
                        )
                        return True
                return False

            # Everything answers before the summary is printed, so it stays the last lines.
            ready = {
                "web": lambda: _answers(f"http://{addr}/healthz"),
                "MCP": lambda: _listens(settings.MCP_RESOURCE_URL),
                "worker": lambda: bool(WORKER_READY.search(log_path.read_text(errors="replace"))),
            }
            deadline = time.monotonic() + 120
            while ready and not stopping:
                if exited():
                    stopping = True
                    break
                ready = {name: check for name, check in ready.items() if not check()}
                if ready and time.monotonic() > deadline:
                    self.stderr.write(f"not ready after 120 s: {', '.join(ready)}; see {log_path}")
                    break
                time.sleep(0.25)
            if not stopping:
                self._summary(addr)
            while not stopping:
                stopping = exited()
                time.sleep(0.5)
        finally:
            for child in children:
                if child.poll() is None:
                    # The main process only: Celery then shuts its pool down itself (warm).
                    child.terminate()
            for child in children:
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(child.pid, signal.SIGKILL)
            world.stop()
            x_api.stop()
            backend.stop()
            quotes.stop()
            gnosis_pay.stop()
            price_server.stop()
            monerium.stop()
            avenia.stop()
            log.close()
            self.stdout.write(
                "stopped web server, MCP server, worker, local providers and chain stack"
            )

    def _summary(self, addr: str) -> None:
        """The last lines of the start-up: where things are and how to sign in."""
        write = self.stdout.write
        write("")
        write(
            f"metrics       curl -H 'Authorization: Bearer {os.environ['METRICS_TOKEN']}' "
            f"http://{addr}/metrics"
        )
        write('first steps   README.md, "A first walk"')
        write(self.style.SUCCESS(f"Picnic is up on http://{addr}/ — Ctrl-C stops everything"))
        for line in demo_logins(demo_token() or "(none: seed_demo did not run)", web=addr):
            write(f"  {line}")
