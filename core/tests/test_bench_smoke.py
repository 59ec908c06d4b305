"""Every script under bench/ runs, with its documented command, at a tiny size, from a fresh
database: a schema change that breaks a bench fails here, not months later on the day someone
needs the numbers. No timing is asserted; each run must exit 0 and print its result line.

The scripts are found by their `if __name__ == "__main__":` (the modules they load are not
scripts), so a new bench without a tiny run below fails `test_every_bench_script_has_a_smoke_run`.
Each fresh database is a copy of the session's migrated test database
(BENCH_TEMPLATE_DATABASE, see bench/common.py) instead of a migration from scratch, and the
chain benches run on the session's local world (BENCH_LOCAL_WORLD) instead of starting their own.
The database-only benches run three at a time and the chain benches one after another beside them
(`Runs`): most of a tiny run is start-up and waiting (imports, a database copy, servers coming up),
so CI's two cores stay busy."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from bench.common import world_ports

# The session's test database is the template: django_db makes pytest-django create it.
pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    prints: str  # in its result line
    marks: tuple = ()
    database: str = "argument"  # "argument" (--database NAME), "url" (its own, in DATABASE_URL)
    env: dict[str, str] = field(default_factory=dict)


REDIS = pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("redis"),
    reason="needs a Redis broker (set CELERY_BROKER_URL=redis://…)",
)
PG = pytest.mark.postgres

RUNS = {
    "admin_pages.py": Run(
        ("--rows", "1000", "--rounds", "1"), "pages meet p95", (PG,), database="url"
    ),
    "balances.py": Run(
        ("--accounts", "1", "--rounds", "2", "--requests", "2"),
        "two chains / one chain at p50: ",
        (pytest.mark.chain,),
    ),
    "batches.py": Run(("--items", "3", "--rounds", "1"), "action reconcile, executed: ", (PG,)),
    # A cluster of its own (1 instance of each type) on private services: the second size
    # would only start the same code again, twice as many processes (the chaos test starts
    # 2 of each).
    "cluster_scale.py": Run(
        ("--seconds", "1", "--clients", "1", "--instances", "1"),
        "1x MCP tool call ",
        (pytest.mark.chaos,),
        database="none",
    ),
    "console_pages.py": Run(
        ("--rows", "1000", "--rounds", "1"), "console pages meet p95", (PG,), database="url"
    ),
    "dm_worker.py": Run(
        ("--per-round", "5", "--rounds", "1", "--events", "5", "--warm", "5"),
        "ratio project/protocol deliveries/s: ",
        (PG, REDIS),
    ),
    # Redis only: its Sentinel group starts in seconds (PostgreSQL's and RabbitMQ's in about a
    # minute each), and the script's code is the same for every store.
    "failover.py": Run(
        ("redis", "--workdir", "/tmp/picnic-failover-smoke"),
        "redis: start ",
        (pytest.mark.chaos,),
        database="none",
    ),
    "gc_pauses.py": Run(
        ("--actions", "3", "--pages", "5", "--rounds", "1"),
        "ratio p99 pause without/with freeze: ",
    ),
    "growth.py": Run(
        ("--small", "200", "--large", "2000", "--rounds", "1", "--warm", "0"),
        "growth factor 2,000/200",
        (PG,),
    ),
    "history_pages.py": Run(
        ("--entries", "200", "--page", "10", "--repeat", "2"), "ratio ours/baseline: "
    ),
    "live_updates.py": Run(
        ("--rounds", "1", "--workers", "1"),
        "ratio polling p95 / live p95: ",
        (PG, REDIS, pytest.mark.browser),
        database="url",
        # Its live pages need the Redis event channel; the broker's Redis serves (REDIS above).
        env={"EVENTS_URL": settings.CELERY_BROKER_URL},
    ),
    "metrics_scrape.py": Run(
        ("--rows", "100", "--open", "5", "--rounds", "1"), "ratio baseline/ours: ", (PG,)
    ),
    "owner_gas.py": Run((), "multi-owner spread over ", (pytest.mark.chain,), database="none"),
    "permission_gas.py": Run(
        (), "permissioned/passkey transfer gas: ", (pytest.mark.chain,), database="none"
    ),
    "status_tool.py": Run(
        ("--actions", "10", "--rounds", "1", "--requests", "5", "--warm", "5"),
        "ratio p99 get_action_status/bare: ",
        (PG,),
    ),
    "trace_overhead.py": Run(
        ("--requests", "10", "--rounds", "1"), "ratio ours/baseline: ", database="none"
    ),
}


def _scripts() -> list[str]:
    return sorted(
        path.name
        for path in BENCH.glob("*.py")
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
    )


def test_every_bench_script_has_a_smoke_run():
    assert _scripts() == sorted(RUNS), "give each bench script a tiny run in RUNS"


def _admin(url: str):
    import psycopg

    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


@pytest.fixture(scope="module")
def fresh(django_db_setup, django_db_blocker):
    """(the DATABASE_URL server, a prefix for database names, the template's name or None)."""
    from django.db import connection, connections

    with django_db_blocker.unblock():
        test_db = connection.settings_dict["NAME"]  # django_db_setup pointed it at the test db
        url = os.environ.get("DATABASE_URL", "")
    if connection.vendor != "postgresql":
        # The session's SQLite test database (in memory or not), copied into a file.
        template = Path(settings.VAR_DIR) / f"bench_smoke_template_{os.getpid()}.sqlite3"
        template.unlink(missing_ok=True)
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("VACUUM INTO %s", [str(template)])
        yield None, f"bench_smoke_{os.getpid()}", str(template)
        template.unlink(missing_ok=True)
        return
    connections.close_all()  # a database being copied must have no session open
    template = f"{test_db}_bench_template"[:63]
    with _admin(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{template}"')
        for attempt in range(10):
            try:
                admin.execute(f'CREATE DATABASE "{template}" TEMPLATE "{test_db}"')
                break
            except Exception:  # noqa: BLE001 - a session of this run still closing: again
                if attempt == 9:
                    raise
                time.sleep(1)
    yield url, f"{test_db}_bench"[:50], template
    with _admin(url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def _lane(run: Run) -> str:
    """ "pool": side by side with the other database-only benches; "chain": one after another
    beside the pool (they fund fresh accounts from the session world's one deployer: its
    nonces); "alone": with nothing else running (the browser and cluster benches load both
    cores themselves)."""
    names = {mark.name for mark in run.marks}
    if names & {"browser", "chaos"}:
        return "alone"
    return "chain" if "chain" in names else "pool"


def _will_skip(item) -> bool:
    # The marks that skip a bench test here: `skip` (conftest's on SQLite), `skipif` with a
    # computed condition (REDIS).
    return any(
        mark.name == "skip" or (mark.name == "skipif" and any(arg is True for arg in mark.args))
        for mark in item.iter_markers()
    )


class Runs:
    """The bench runs of this module's selected tests, each a subprocess on a fresh database of
    its own, and each test collects its own result. The "pool" lane's start together, PARALLEL
    at a time, when the module's first test needs them; the "chain" lane's one after another
    beside the pool, from the first chain test on (it brings the session's world); an "alone"
    bench waits until both lanes are idle and runs in its test. Killed, not waited for, if the
    module ends early (-x, Ctrl-C)."""

    PARALLEL = 3

    def __init__(self, fresh, selected: list[str]):
        self.fresh = fresh
        self.selected = [name for name in selected if name in RUNS]
        self.pool = ThreadPoolExecutor(self.PARALLEL, thread_name_prefix="bench-smoke")
        self.chain_lane = ThreadPoolExecutor(1, thread_name_prefix="bench-smoke-chain")
        self.started: dict[str, Future] = {}
        self.processes: set[subprocess.Popen] = set()
        self.stopping = False
        self.lock = threading.Lock()
        self._start("pool", self.pool, {})

    def _start(self, lane: str, executor: ThreadPoolExecutor, extra_env: dict[str, str]) -> None:
        for name in self.selected:
            if _lane(RUNS[name]) == lane and name not in self.started:
                self.started[name] = executor.submit(self.run, name, extra_env)

    def result(self, script: str, extra_env: dict[str, str]) -> tuple[int, str, str]:
        lane = _lane(RUNS[script])
        if lane == "chain":
            self._start("chain", self.chain_lane, extra_env)
        if script in self.started:
            return self.started[script].result()
        for future in list(self.started.values()):  # alone: nothing else shares the machine
            future.exception()
        return self.run(script, extra_env)

    def run(self, script: str, extra_env: dict[str, str]) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of the script's tiny run, from a fresh database."""
        url, prefix, template = self.fresh
        run = RUNS[script]
        stem = script.removesuffix(".py")
        env = {**os.environ, **run.env, **extra_env}
        if template:
            env["BENCH_TEMPLATE_DATABASE"] = template
        args = list(run.args)
        own = None
        if run.database == "argument":
            args += ["--database", f"{prefix}_{stem}"]
        elif run.database == "url" and url:
            # These keep their database between runs and refuse a name without their prefix.
            own = {"admin_pages": "bench_admin", "console_pages": "bench_console"}.get(stem, "")
            own = f"{own}_{prefix}_{stem}" if own else f"{prefix}_{stem}"
            env["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/" + own[:63]
        try:
            with self.lock:
                if self.stopping:
                    return -1, "", "not run: the module ended first"
                process = subprocess.Popen(
                    [sys.executable, f"bench/{script}", *args],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                self.processes.add(process)
            try:
                stdout, stderr = process.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
                stderr += "\n(killed after 600 s)"
            finally:
                with self.lock:
                    self.processes.discard(process)
            return process.returncode, stdout, stderr
        finally:
            if own and url:
                with _admin(url) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{own[:63]}" WITH (FORCE)')

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            for process in self.processes:
                process.kill()
        for executor in (self.pool, self.chain_lane):
            executor.shutdown(wait=True, cancel_futures=True)


TEST = "test_the_bench_runs_at_a_tiny_size_from_a_fresh_database"


@pytest.fixture(scope="module")
def runs(fresh, request):
    selected = [
        item.callspec.params["script"]
        for item in request.session.items
        if item.getparent(pytest.Module) is request.node
        and getattr(item, "originalname", "") == TEST
        and not _will_skip(item)
    ]
    runs = Runs(fresh, selected)
    yield runs
    runs.stop()


@pytest.mark.parametrize(
    "script",
    [pytest.param(name, marks=RUNS[name].marks if name in RUNS else ()) for name in _scripts()],
)
def test_the_bench_runs_at_a_tiny_size_from_a_fresh_database(script, runs, request):
    run = RUNS[script]
    extra_env = {}
    if any(mark.name == "chain" for mark in run.marks):
        # The session's local world (fresh accounts in each bench), not nodes of its own.
        extra_env["BENCH_LOCAL_WORLD"] = world_ports(request.getfixturevalue("chain_world"))
    returncode, stdout, stderr = runs.result(script, extra_env)
    assert returncode == 0, stdout[-3000:] + stderr[-5000:]
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    assert any(run.prints in line for line in lines), stdout[-3000:]
