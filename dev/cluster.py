"""The cluster on one machine: several instances of each process type behind HAProxy.

`manage.py run_cluster` (`make cluster`) and the chaos test (picnic/tests/test_chaos.py) start
it: N web (gunicorn + uvicorn workers), N MCP servers, N Celery workers per queue kind, a beat
and a standby beat (only the holder of the beat lock ticks: picnic/beat.py), and HAProxy in
front (picnic/haproxy.cfg.template: health checks on /readyz, redispatch, retries of
idempotent requests only). A supervisor thread restarts any process that exits, as systemd's
`Restart=always` would; the chaos test SIGKILLs processes and measures how long the cluster
takes to serve again.

Also here: a private redis-server with AOF, a private RabbitMQ node and a private PostgreSQL
(initdb in a directory), each on a free loopback port, so that a test can restart them without
touching anything else.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kombu import Connection

from dev import processes

ROOT = Path(__file__).resolve().parent.parent
HAPROXY = "/usr/sbin/haproxy"
# Not the wrappers on PATH, which run as the rabbitmq user (another Erlang cookie).
RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
RABBITMQ_CTL = Path("/usr/lib/rabbitmq/bin/rabbitmqctl")
TEMPLATE = ROOT / "picnic" / "haproxy.cfg.template"
QUEUE_KINDS = ("chain", "dm", "operations", "housekeeping", "fetch")
# What each process type prints once it serves.
READY_MARKS = {
    "web": "Application startup complete",
    "mcp": "",  # no startup line at log level warning: its port answering is the sign
    "worker": " ready.",
    "beat": "beat: ",  # "acquired the beat lock" or "standing by"
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_for(predicate: Callable[[], object], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.1)


def mcp_server(env: dict[str, str], log_path: Path, *, port: int) -> processes.Process:
    argv = [sys.executable, "manage.py", "mcp", "--transport", "http", "--port", str(port)]
    return processes.Process("mcp", argv, env, log_path)


def haproxy_config(
    *,
    stats_socket: Path,
    web_port: int,
    mcp_port: int,
    web_servers: dict[str, int],
    mcp_servers: dict[str, int],
    mcp_check_path: str = "/.well-known/oauth-protected-resource/mcp",
) -> str:
    """The shipped HAProxy configuration (picnic/haproxy.cfg.template) for these loopback
    servers, by name and port."""

    def lines(servers: dict[str, int]) -> str:
        return "\n".join(
            f"    server {name} 127.0.0.1:{port} check" for name, port in servers.items()
        )

    return string.Template(TEMPLATE.read_text()).substitute(
        stats_socket=stats_socket,
        web_port=web_port,
        mcp_port=mcp_port,
        web_servers=lines(web_servers),
        mcp_servers=lines(mcp_servers),
        mcp_check_path=mcp_check_path,
    )


@dataclass
class Member:
    """One supervised process of the cluster: its kind, its port (web, mcp) and its starts."""

    name: str
    kind: str
    make: Callable[[], processes.Process]
    port: int | None = None
    proc: processes.Process | None = None
    starts: int = 0
    log_offset: int = 0
    last_exit: float | None = None

    def start(self) -> None:
        proc = self.make()
        # The log is appended to across restarts: what this start wrote begins here.
        self.log_offset = len(proc.log())
        self.proc = proc.start()
        self.starts += 1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def log(self) -> str:
        """What the current process wrote."""
        return self.proc.log()[self.log_offset :] if self.proc is not None else ""

    def ready(self) -> bool:
        if not self.alive():
            return False
        if self.port is not None and not port_open(self.port):
            return False
        return READY_MARKS[self.kind] in self.log()


class Cluster:
    def __init__(
        self,
        env: dict[str, str],
        workdir: Path,
        *,
        web_port: int,
        mcp_port: int,
        instances: int = 2,
        beats: int = 2,
        web_workers: int = 1,
        worker_concurrency: int | None = None,
        queue_prefix: str = "",
        check_interval: float = 0.25,
    ):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.web_port, self.mcp_port = web_port, mcp_port
        self.web_url = f"http://127.0.0.1:{web_port}"
        self.mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
        self.env = {
            **env,
            # HAProxy, on this machine, is the proxy whose X-Forwarded-For the web believes.
            "TRUSTED_PROXY_IPS": env.get("TRUSTED_PROXY_IPS") or "127.0.0.1/32",
            "MCP_API_URL": self.web_url,  # the MCP servers call the API through HAProxy too
            "MCP_RESOURCE_URL": self.mcp_url,
            "MCP_ALLOWED_ORIGINS": f"http://127.0.0.1:{mcp_port},http://localhost:{mcp_port}",
        }
        self.members: dict[str, Member] = {}
        # A Unix socket's path has at most 107 bytes: a short directory of its own.
        self.stats_socket = Path(tempfile.mkdtemp(prefix="picnic-haproxy-")) / "admin.sock"
        self.check_interval = check_interval
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.haproxy: processes.Process | None = None
        self.restarts: list[tuple[str, float]] = []
        logs = self.workdir
        for i in range(1, instances + 1):
            port = free_port()
            self._add(
                f"web-{i}",
                "web",
                lambda port=port, i=i: processes.gunicorn(
                    self.env, logs / f"web-{i}.log", bind=f"127.0.0.1:{port}", workers=web_workers
                ),
                port,
            )
        for i in range(1, instances + 1):
            port = free_port()
            self._add(
                f"mcp-{i}",
                "mcp",
                lambda port=port, i=i: mcp_server(self.env, logs / f"mcp-{i}.log", port=port),
                port,
            )
        for kind in QUEUE_KINDS:
            for i in range(1, instances + 1):
                name = f"worker-{kind}-{i}"
                queue = f"{queue_prefix}{kind}"
                self._add(
                    name,
                    "worker",
                    lambda name=name, queue=queue: processes.Process(
                        "worker",
                        [
                            *processes.celery_worker_argv([queue], concurrency=worker_concurrency),
                            "-n",
                            f"{name}@%h",
                        ],
                        self.env,
                        logs / f"{name}.log",
                    ),
                )
        for i in range(1, beats + 1):
            self._add(
                f"beat-{i}",
                "beat",
                lambda i=i: processes.celery_beat(
                    self.env, logs / f"beat-{i}.log", schedule_path=logs / f"beat-{i}-schedule"
                ),
            )

    def _add(self, name: str, kind: str, make, port: int | None = None) -> None:
        self.members[name] = Member(name, kind, make, port)

    # --- HAProxy --------------------------------------------------------------------------

    def haproxy_config(self) -> str:
        def servers(kind: str) -> dict[str, int]:
            return {m.name: m.port for m in self.members.values() if m.kind == kind}

        return haproxy_config(
            stats_socket=self.stats_socket,
            web_port=self.web_port,
            mcp_port=self.mcp_port,
            web_servers=servers("web"),
            mcp_servers=servers("mcp"),
            mcp_check_path=self.env.get(
                "MCP_HEALTH_CHECK_PATH", "/.well-known/oauth-protected-resource/mcp"
            ),
        )

    def haproxy_command(self, command: str) -> str:
        """One command on HAProxy's admin socket (`show stat`, `set server web/web-1 state
        drain`)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.stats_socket))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def servers_up(self, backend: str) -> set[str]:
        lines = self.haproxy_command("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {
            r["svname"]
            for r in rows
            if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")
            if r["status"] == "UP"
        }

    # --- lifecycle ------------------------------------------------------------------------

    def start(self, *, timeout: float = 120) -> Cluster:
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> Cluster:
        for member in self.members.values():
            member.start()
        config = self.workdir / "haproxy.cfg"
        config.write_text(self.haproxy_config())
        self.haproxy = processes.Process(
            "haproxy", [HAPROXY, "-db", "-f", str(config)], self.env, self.workdir / "haproxy.log"
        ).start()
        wait_for(
            lambda: all(m.ready() for m in self.members.values()),
            timeout=timeout,
            what="the cluster's processes",
        )
        wait_for(
            lambda: self.servers_up("web") and self.servers_up("mcp"),
            timeout=30,
            what="HAProxy's backends",
        )
        self._supervisor = threading.Thread(target=self._supervise, daemon=True)
        self._supervisor.start()
        return self

    def _supervise(self) -> None:
        """Restart any process that exits (killed, or a beat that lost its lock)."""
        while not self._stopping.wait(self.check_interval):
            for member in self.members.values():
                if self._stopping.is_set():
                    return
                if not member.alive():
                    member.last_exit = time.monotonic()
                    self.restarts.append((member.name, member.last_exit))
                    member.start()

    def kill(self, name: str) -> float:
        """SIGKILL one member's process group (the supervisor starts it again); when."""
        member = self.members[name]
        member.proc.kill()
        return time.monotonic()

    def beat_holder(self) -> str | None:
        """The beat whose current process acquired the lock."""
        for member in self.members.values():
            if member.kind == "beat" and member.alive():
                if "acquired the beat lock" in member.log():
                    return member.name
        return None

    def pids(self) -> dict[str, int]:
        return {name: m.proc.pid for name, m in self.members.items() if m.alive()}

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM to every process at once (HAProxy first: no new requests), then wait."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        procs = [m.proc for m in self.members.values() if m.proc is not None]
        if self.haproxy is not None:
            procs.insert(0, self.haproxy)
        for proc in procs:
            if proc.alive():
                proc.proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in procs:
            proc.stop(timeout=max(0.1, deadline - time.monotonic()))
        shutil.rmtree(self.stats_socket.parent, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- private services: Redis with AOF, PostgreSQL ---------------------------------------------


class RedisServer:
    """A redis-server of its own with the append-only file on every write (`appendfsync
    always`): a SIGKILL loses nothing it acknowledged."""

    def __init__(self, workdir: Path, *, port: int | None = None):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: processes.Process | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> RedisServer:
        argv = [
            shutil.which("redis-server") or "/usr/bin/redis-server",
            "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        ]  # fmt: skip
        self.proc = processes.Process("redis", argv, dict(os.environ), self.dir / "redis.log")
        self.proc.start()
        wait_for(lambda: port_open(self.port), timeout=20, what="redis-server")
        return self

    def kill(self) -> None:
        self.proc.kill()

    def restart(self) -> None:
        """SIGKILL, then start again on the same port and AOF."""
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=10)


class RabbitServer:
    """A RabbitMQ node of its own (Debian's package) on a free loopback port, its data under
    `workdir`, no plugins. A restart is a clean stop (SIGTERM) and a start on the same data: a
    single node killed with SIGKILL can come back with its quorum queues leaderless
    (docs/deploy.md, "RabbitMQ")."""

    def __init__(self, workdir: Path, *, port: int | None = None):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: processes.Process | None = None
        (self.dir / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.env = {
            **os.environ,
            "RABBITMQ_NODENAME": f"picnic-{uuid.uuid4().hex[:8]}@localhost",
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
        }

    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def answers(self) -> bool:
        """Whether the node completes an AMQP handshake (its port opens before it boots)."""
        try:
            with Connection(self.url(), connect_timeout=1) as conn:
                conn.ensure_connection(max_retries=0)
            return True
        except Exception:  # noqa: BLE001 - any failure to connect means "not yet"
            return False

    def launch(self) -> RabbitServer:
        """Start the node without waiting for it (its boot overlaps other set-up); `wait()`."""
        if not RABBITMQ_SERVER.exists():
            raise FileNotFoundError(f"{RABBITMQ_SERVER}: install rabbitmq-server")
        argv = [str(RABBITMQ_SERVER)]
        self.proc = processes.Process("rabbitmq", argv, self.env, self.dir / "rabbitmq.out")
        self.proc.start()
        return self

    def wait(self, timeout: float = 120) -> RabbitServer:
        wait_for(self.answers, timeout=timeout, what="rabbitmq-server")
        return self

    def start(self) -> RabbitServer:
        return self.launch().wait()

    def _ctl(self, command: str) -> None:
        subprocess.run([str(RABBITMQ_CTL), "-n", self.env["RABBITMQ_NODENAME"], command],
                       env=self.env, check=True, capture_output=True, timeout=120)  # fmt: skip

    def restart(self) -> None:
        """The broker restarted: the RabbitMQ application stopped (every connection closed,
        the queues shut down) and started again on its data (quorum queues recover from their
        logs), in the running Erlang VM — what a node restart is to its clients, in seconds
        rather than the half minute a VM boot takes on a loaded 2-core machine."""
        self._ctl("stop_app")
        self._ctl("start_app")
        self.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.alive():
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise FileNotFoundError(f"no /usr/lib/postgresql/*/bin/{name}: install postgresql")
    return str(found[-1])


class PostgresServer:
    """A PostgreSQL cluster of its own (initdb in a fresh temporary directory, removed by
    stop()) on a free loopback port, run as the `postgres` user when started by root
    (PostgreSQL refuses root, and root's temporary directories are closed to it)."""

    def __init__(self, *, port: int | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="picnic-pg-"))
        self.data = self.dir / "data"
        self.port = port or free_port()

    def url(self, name: str = "picnic") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *argv: str) -> None:
        command = list(argv)
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd="/")

    def _pg_ctl(self, *args: str) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        )
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.dir / "postgres.log"), "-w", "-t", "60", *args)  # fmt: skip

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        if not self.data.exists():
            self._run(_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres",
                      "--auth=trust", "--no-sync", "-E", "UTF8")  # fmt: skip
        self._pg_ctl("start")
        return self

    def restart(self) -> None:
        """A fast shutdown (sessions are cut, as in a failover) and a start."""
        self._pg_ctl("-m", "fast", "restart")

    def stop(self) -> None:
        if self.data.exists():
            try:
                self._pg_ctl("-m", "immediate", "stop")
            except subprocess.CalledProcessError:
                pass  # not running
        shutil.rmtree(self.dir, ignore_errors=True)
