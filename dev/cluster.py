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

import psycopg
import redis
import redis.sentinel
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

    def cut_connections(self, name: str, ports: set[int]) -> int:
        """Cut (`ss -K`: a reset both ways) every TCP connection that a member's processes
        hold to one of `ports`, as a network fault or a broker dropping a client would; how
        many were cut. The processes live on: only their connections are gone."""
        group = self.members[name].proc.pid
        pids = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process ended meanwhile
            if int(fields[2]) == group:  # its process group
                pids.add(int(stat.parent.name))
        listing = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True,
                                 text=True, check=True).stdout  # fmt: skip
        cut = 0
        for line in listing.splitlines():
            columns = line.split()
            if len(columns) < 5 or not any(f"pid={pid}," in line for pid in pids):
                continue
            local, peer = columns[2].rsplit(":", 1)[1], columns[3].rsplit(":", 1)[1]
            if int(peer) in ports:
                subprocess.run(["ss", "-K", "-tn", "dport", "=", f":{peer}", "sport", "=",
                                f":{local}"], capture_output=True, check=True)  # fmt: skip
                cut += 1
        return cut

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

    @staticmethod
    def binary() -> str:
        return shutil.which("redis-server") or "/usr/bin/redis-server"

    def start(self, *, replica_of: int | None = None) -> RedisServer:
        argv = [
            self.binary(),
            "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        ]  # fmt: skip
        if replica_of is not None:
            argv += ["--replicaof", "127.0.0.1", str(replica_of)]
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

    def ctl(self, *args: str) -> str:
        return subprocess.run([str(RABBITMQ_CTL), "-n", self.env["RABBITMQ_NODENAME"], *args],
                              env=self.env, check=True, capture_output=True, text=True,
                              timeout=120).stdout  # fmt: skip

    def _ctl(self, command: str) -> None:
        self.ctl(command)

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


# --- No single node: the stores with failover (`make cluster` HA mode, the chaos test's
# default failover mode). Each on its own loopback ports and folders under `workdir`.


class ReplicatedRedis:
    """A Redis primary, a replica and three sentinels (quorum 2) on loopback ports: the
    clients find the primary through the sentinels (`url()` is a `sentinel://` list). The
    down-after time is short (1 s) so that a lost primary is replaced in about two seconds."""

    MASTER = "picnic"

    def __init__(self, workdir: Path, *, down_after_ms: int = 1000):
        self.dir = Path(workdir)
        self.nodes = [RedisServer(self.dir / f"redis-{i}") for i in (1, 2)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[processes.Process] = []
        self.down_after_ms = down_after_ms

    def url(self, db: int = 0) -> str:
        return ";".join(f"sentinel://127.0.0.1:{port}/{db}" for port in self.sentinel_ports)

    def start(self) -> ReplicatedRedis:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> ReplicatedRedis:
        first, second = self.nodes
        first.start()
        second.start(replica_of=first.port)
        for i, port in enumerate(self.sentinel_ports, 1):
            folder = self.dir / f"sentinel-{i}"
            folder.mkdir(parents=True, exist_ok=True)
            config = folder / "sentinel.conf"  # a sentinel rewrites its file: one each
            config.write_text(
                f"bind 127.0.0.1\nport {port}\ndir {folder}\n"
                f"sentinel monitor {self.MASTER} 127.0.0.1 {first.port} 2\n"
                f"sentinel down-after-milliseconds {self.MASTER} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.MASTER} 10000\n"
                f"sentinel parallel-syncs {self.MASTER} 1\n"
            )
            argv = [first.binary(), str(config), "--sentinel"]
            sentinel = processes.Process("sentinel", argv, dict(os.environ), folder / "log")
            self.sentinels.append(sentinel.start())
        for port in self.sentinel_ports:
            wait_for(lambda port=port: port_open(port), timeout=20, what="redis-sentinel")
        wait_for(lambda: self.primary() is first, timeout=30, what="the sentinels' primary")
        wait_for(lambda: self.in_sync(second), timeout=60, what="the replica's first sync")
        return self

    @staticmethod
    def in_sync(node: RedisServer) -> bool:
        """Whether the replica `node` holds the primary's data (its first sync done)."""
        try:
            with redis.Redis(port=node.port, socket_timeout=1) as client:
                return client.info("replication").get("master_link_status") == "up"
        except redis.RedisError:
            return False

    def primary(self) -> RedisServer | None:
        """The node the sentinels name primary now."""
        sentinel = redis.sentinel.Sentinel(
            [("127.0.0.1", p) for p in self.sentinel_ports], sentinel_kwargs={"socket_timeout": 1}
        )
        try:
            _, port = sentinel.discover_master(self.MASTER)
        except redis.sentinel.MasterNotFoundError:
            return None
        finally:
            for client in sentinel.sentinels:
                client.close()
        return next((node for node in self.nodes if node.port == port), None)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary; it is started again (as a replica of the new primary, once the
        sentinels reconfigure it) by `rejoin()`."""
        node = self.primary()
        node.kill()
        return node

    def rejoin(self, node: RedisServer) -> None:
        """Start a killed node again as a replica of the primary now (a node started as a
        primary would stay one until the sentinels' next look, about 10 s)."""
        node.start(replica_of=self.primary().port)

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop(timeout=10)
        for node in self.nodes:
            node.stop()


class RabbitCluster:
    """Three RabbitMQ nodes clustered (one Erlang cookie: this user's), so a quorum queue has
    three members and keeps its messages with one node lost. `url()` lists the nodes: kombu
    connects to the first that answers."""

    def __init__(self, workdir: Path, *, size: int = 3):
        self.nodes = [RabbitServer(Path(workdir) / f"rabbit-{i}") for i in range(1, size + 1)]

    def url(self) -> str:
        return ";".join(node.url() for node in self.nodes)

    def launch(self) -> RabbitCluster:
        for node in self.nodes:
            node.launch()
        return self

    def wait(self, timeout: float = 180) -> RabbitCluster:
        for node in self.nodes:
            node.wait(timeout)
        first = self.nodes[0].env["RABBITMQ_NODENAME"]
        for node in self.nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", first)
            node.ctl("start_app")
            node.wait(timeout)
        return self

    def start(self) -> RabbitCluster:
        try:
            return self.launch().wait()
        except BaseException:
            self.stop()
            raise

    def queue_leaders(self, prefix: str = "") -> dict[str, str]:
        """Each quorum queue's leader (`rabbitmqctl list_queues name leader`), by node name."""
        for node in self.nodes:
            if node.proc is not None and node.proc.alive():
                out = node.ctl("list_queues", "-q", "--no-table-headers", "name", "leader")
                rows = [line.split("\t") for line in out.splitlines() if "\t" in line]
                return {name: leader for name, leader in rows if name.startswith(prefix)}
        return {}

    def node_named(self, name: str) -> RabbitServer:
        return next(n for n in self.nodes if n.env["RABBITMQ_NODENAME"] == name)

    def kill(self, node: RabbitServer) -> None:
        """SIGKILL the node's VM (the process group: beam, epmd it started, heart)."""
        node.proc.kill()

    def rejoin(self, node: RabbitServer) -> None:
        """Start the killed node again on its data: it rejoins the cluster by itself."""
        node.launch().wait()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


PG_AUTOCTL = "/usr/bin/pg_autoctl"
PG_MONITOR_SETTINGS = {
    # The monitor's defaults take about 50 s to replace a lost primary (5 s health checks, a
    # node unhealthy after 20 s, then 30 s for the old primary to demote itself should it be
    # alive behind a partition); these take about 8 s on one machine. The demote timeout must
    # stay above the keepers' network_partition_timeout (a cut-off primary has stopped taking
    # writes before the standby is promoted). Across a network keep more margin (deploy.md).
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "2000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "5000",
}
PG_KEEPER_SETTINGS = {
    "timeout.network_partition_timeout": "3",
    "timeout.prepare_promotion_catchup": "5",
    "timeout.prepare_promotion_walreceiver": "1",
    "timeout.postgresql_restart_failure_timeout": "5",
}


class FailoverPostgres:
    """PostgreSQL under pg_auto_failover (Debian's pg-auto-failover-cli and
    postgresql-15-auto-failover): a monitor, a primary and a standby with synchronous
    replication (a commit is on both before it is acknowledged, so a failover loses no
    acknowledged write), each `pg_autoctl run` keeper supervising its postgres. `url()` is
    libpq's multi-host form with target_session_attrs=read-write: clients reach whichever node
    is primary. Run as the `postgres` user when started by root, as PostgresServer is."""

    def __init__(self, workdir: Path, *, dbname: str = "picnic", tuned: bool = True):
        self.dir = Path(workdir)
        self.dbname = dbname
        self.tuned = tuned
        self.monitor_port = free_port()
        self.ports = [free_port(), free_port()]
        self.keepers: dict[str, processes.Process] = {}

    @staticmethod
    def available() -> bool:
        return Path(PG_AUTOCTL).exists() and bool(
            list(Path("/usr/lib/postgresql").glob("*/lib/pgautofailover.so"))
        )

    def url(self, name: str | None = None) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return f"postgres://postgres@{hosts}/{name or self.dbname}?target_session_attrs=read-write"

    def node_url(self, index: int, name: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.ports[index]}/{name}"

    def monitor_url(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor_port}/pg_auto_failover?sslmode=disable"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "XDG_CONFIG_HOME": str(self.dir / "config"),
            "XDG_DATA_HOME": str(self.dir / "share"),
            "PG_CONFIG": str(Path(_pg_bin("pg_ctl")).parent / "pg_config"),
            "HOME": str(self.dir),
        }

    def _as_postgres(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        env = [f"{k}={v}" for k, v in self._env().items() if k.startswith(("XDG_", "PG_", "HOME"))]
        return ["runuser", "-u", "postgres", "--", "env", *env, *argv]

    def _autoctl(self, *args: str) -> str:
        done = subprocess.run(
            self._as_postgres([PG_AUTOCTL, *args]), env=self._env(), cwd="/",
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {args[0]} {args[1]}: {done.stderr[-2000:]}")
        return done.stdout

    def _keeper(self, name: str) -> processes.Process:
        argv = self._as_postgres([PG_AUTOCTL, "run", "--pgdata", str(self.dir / name)])
        proc = processes.Process(f"pg-{name}", argv, self._env(), self.dir / f"{name}.log")
        self.keepers[name] = proc.start()
        return proc

    def _create(self, name: str, port: int) -> None:
        self._autoctl(
            "create", "postgres", "--pgdata", str(self.dir / name), "--pgport", str(port),
            "--pgctl", _pg_bin("pg_ctl"), "--hostname", "127.0.0.1", "--name", name,
            "--listen", "127.0.0.1",
            "--monitor", self.monitor_url(), "--auth", "trust", "--no-ssl",
            "--dbname", self.dbname, "--username", "postgres",
        )  # fmt: skip
        if self.tuned:
            for key, value in PG_KEEPER_SETTINGS.items():
                self._autoctl("config", "set", "--pgdata", str(self.dir / name), key, value)
        self._keeper(name)

    def start(self) -> FailoverPostgres:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> FailoverPostgres:
        self.dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._autoctl(
            "create", "monitor", "--pgdata", str(self.dir / "monitor"),
            "--pgport", str(self.monitor_port), "--pgctl", _pg_bin("pg_ctl"),
            "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl",
        )  # fmt: skip
        monitor = str(self.dir / "monitor")
        self._autoctl("config", "set", "--pgdata", monitor, "postgresql.listen_addresses",
                      "127.0.0.1")  # fmt: skip
        self._keeper("monitor")
        wait_for(lambda: self._monitor("SELECT 1") is not None, timeout=60, what="the monitor")
        if self.tuned:
            for key, value in PG_MONITOR_SETTINGS.items():
                self._monitor(f"ALTER SYSTEM SET {key} = '{value}'")
            self._monitor("SELECT pg_reload_conf()")
        self._create("node1", self.ports[0])
        wait_for(lambda: self.states().get("node1") == "single", timeout=120, what="node1")
        self._create("node2", self.ports[1])
        wait_for(
            lambda: sorted(self.states().values()) == ["primary", "secondary"],
            timeout=180,
            what="the standby",
        )
        return self

    def states(self) -> dict[str, str]:
        """Each node's state as the monitor has it (`primary`, `secondary`, `catchingup`…)."""
        rows = self._monitor("SELECT nodename, reportedstate FROM pgautofailover.node")
        return {name: str(state) for name, state in rows or []}

    def _monitor(self, sql: str) -> list | None:
        """`sql` on the monitor's database: its rows, or None while it does not answer."""
        url = f"postgres://postgres@127.0.0.1:{self.monitor_port}/pg_auto_failover"
        try:
            with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
                cursor = conn.execute(sql)
                return cursor.fetchall() if cursor.description else []
        except psycopg.OperationalError:
            return None

    def primary(self) -> str | None:
        return next((n for n, s in self.states().items() if s in ("primary", "single",
                                                                  "wait_primary")), None)  # fmt: skip

    def kill(self, name: str) -> None:
        """SIGKILL the node: its keeper and its postgres (one process group)."""
        self.keepers[name].kill()

    def rejoin(self, name: str) -> None:
        """Start the killed node's keeper again: it rejoins as the standby (pg_rewind)."""
        self._keeper(name)

    def stop(self) -> None:
        for name in ("node2", "node1", "monitor"):
            keeper = self.keepers.get(name)
            if keeper is not None:
                keeper.stop(timeout=30)
