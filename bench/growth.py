"""How the hot paths' cost grows with the data: an agent's status read by public id through the
API (`GET /api/v1/actions/<id>`, bearer token), the support console's home and its search (by
action id, by username), on one PostgreSQL database filled by bench/admin_pages.py's SQL with
--small rows per app (actions, DM deliveries, operations, each with 3 history rows), timed,
then grown to --large rows per app (the added rows are older: the recent ones, which the home
and the searched row are, stay the same) and timed again. Served by gunicorn (`picnic.wsgi`, 2
sync workers, DEBUG off); each round asks every path once in a shuffled order, with a
baseline (the staff password-change form: session and user, no table read) that shows how
much the machine itself changed between the two timings. Prints p50/p99 per path and size,
the growth factor large / small, and the generation's time and rate.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/growth.py --database bench_growth \
        [--small 1000000] [--large 10000000] [--rounds 30] [--chunk 250000] [--keep]

The database is `<database>`, made (or copied from $BENCH_TEMPLATE_DATABASE) and migrated when
missing. Rows are made in SQL (`INSERT … SELECT … FROM generate_series`, --chunk rows a
statement), the three apps side by side on two connections (each app's statements in order);
the loaded tables, and the tables that reference them, are switched to UNLOGGED first (no WAL:
the bench database is throwaway, and the reads it times are the same on either kind). While a
load at least doubles the tables, their non-unique indexes are dropped and then made again,
two at a time, from the definitions PostgreSQL printed for them (kept in a table of the
database first, so an interrupted run restores them on its next start). Then VACUUM ANALYZE,
two tables at a time. On a local server the loading backends run at the lowest CPU priority
(renice 19, and ionice idle where the disk scheduler honours it). A kept database (--keep) is
reused when it holds --small or --large rows per app.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import admin_pages as ap  # noqa: E402 - the data and the staff login of the admin bench

from bench.common import (  # noqa: E402
    ROOT,
    create_database,
    machine,
    migrate_and_collect,
    percentile,
    serve_wsgi,
    server_env,
    stop_server,
)

# The API's audience: the token is bound to it (RFC 8707), the server is told it.
PUBLIC_BASE_URL = "http://localhost:8000"
HISTORY = {
    "actions_action": "actions_actionstatushistory",
    "messaging_delivery": "messaging_deliverystatushistory",
    "operations_operation": "operations_operationstatushistory",
}
LOADED = (*HISTORY, *HISTORY.values())
BASELINE = "baseline: password-change form"
# Row 1000 of each app, a few hours old (an older finished action is past the API's
# retention, and not found); the added rows are older, so it is the same row at both sizes.
TARGET_ROW = 1000
# Loading connections: one per core of the 2-core machine, each at the lowest priority.
WORKERS = 2


def agent_token(conn, action_id: str) -> str:
    """A bearer token of the action's owner, for the bench agent application (admin_pages'
    `bench`), stored as django-oauth-toolkit stores one (the lookup is by checksum)."""
    token = secrets.token_urlsafe(32)
    conn.execute(
        """INSERT INTO oauth2_provider_accesstoken (token, token_checksum, expires, scope,
               application_id, user_id, created, updated, resource)
           SELECT %s, %s, now() + interval '1 day', 'read:actions', application_id, user_id,
                  now(), now(), %s::jsonb
           FROM actions_action WHERE id = %s""",
        [token, hashlib.sha256(token.encode()).hexdigest(), f'["{PUBLIC_BASE_URL}"]', action_id],
    )
    conn.commit()
    return token


def lowest_priority(conn) -> str:
    """Renice the connection's backend to 19 when it is a postgres process of this machine (the
    load then takes only the CPU others leave), and put it in the idle I/O class (which only
    the BFQ disk scheduler honours); what was done."""
    pid = conn.info.backend_pid
    try:
        if not Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
            return "backend not on this machine: not reniced"
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except OSError as error:  # another host's pid, or not permitted
        return f"backend {pid} not reniced ({error.strerror})"
    ionice = shutil.which("ionice")
    if ionice:
        subprocess.run([ionice, "-c3", "-p", str(pid)], check=False, capture_output=True)
    # Index builds and VACUUM stay in this backend, not in parallel workers at priority 0.
    conn.execute("SET max_parallel_maintenance_workers = 0")
    conn.commit()
    return f"backend {pid} reniced to 19"


def restore_indexes(url: str, conn) -> float:
    """Make the indexes `drop_indexes` dropped (this run's or an interrupted one's), the largest
    tables' first, on `WORKERS` connections; switch autovacuum back on; the seconds it took."""
    began = time.monotonic()
    if dropped(conn):
        found = conn.execute(
            """SELECT name, definition FROM bench_growth_index
               ORDER BY pg_total_relation_size(substring(definition from ' ON ([^ ]+) ')) DESC, name"""
        ).fetchall()
        conn.commit()

        def build(worker, job: tuple[str, str]) -> None:
            name, definition = job
            started = time.monotonic()
            worker.execute(definition)
            worker.execute("DELETE FROM bench_growth_index WHERE name = %s", [name])
            worker.commit()
            if time.monotonic() - started > 10:  # the slow ones, to see where the time goes
                print(f"  index {name}: {time.monotonic() - started:.0f} s", flush=True)

        in_parallel(url, [[job] for job in found], build)
    for table in LOADED:
        conn.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
    conn.commit()
    return time.monotonic() - began


def drop_indexes(conn) -> None:
    """Drop the loaded tables' non-unique indexes, their definitions first saved (in the same
    transaction) for `restore_indexes`; no autovacuum on them while they load."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS bench_growth_index (name text PRIMARY KEY, definition text)"
    )
    found = conn.execute(
        """SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i
           JOIN pg_class c ON c.oid = i.indexrelid
           WHERE i.indrelid::regclass::text = ANY(%s) AND NOT i.indisunique""",
        [list(LOADED)],
    ).fetchall()
    for name, definition in found:
        conn.execute(
            "INSERT INTO bench_growth_index VALUES (%s, %s) ON CONFLICT DO NOTHING",
            [name, definition],
        )
        conn.execute(f'DROP INDEX "{name}"')
    for table in LOADED:
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    conn.commit()


def dropped(conn) -> int:
    """How many indexes `drop_indexes` dropped and no `restore_indexes` made again yet."""
    if not conn.execute("SELECT to_regclass('bench_growth_index')").fetchone()[0]:
        return 0
    return conn.execute("SELECT count(*) FROM bench_growth_index").fetchone()[0]


def grow(url: str, conn, rows: int, chunk: int) -> dict[str, float]:
    """The database filled to `rows` per app (grown when it holds fewer, made again when it
    holds more), vacuumed and analyzed: the seconds of each step."""
    have = ap.counts(conn)
    if set(have.values()) == {rows}:
        if not dropped(conn):
            return {}
        took = {"indexes": restore_indexes(url, conn)}  # an interrupted load's
    else:
        took = bulk_load(url, conn, have, rows, chunk)
    started = time.monotonic()
    tables = conn.execute(
        """SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace
           ORDER BY pg_total_relation_size(oid) DESC"""
    ).fetchall()
    conn.commit()

    def vacuum(worker, table: str) -> None:
        worker.autocommit = True
        worker.execute(f'VACUUM ANALYZE "{table}"')
        worker.autocommit = False

    in_parallel(url, [[table] for (table,) in tables], vacuum)
    took["vacuum analyze"] = time.monotonic() - started
    return took


def bulk_load(url: str, conn, have: dict[str, int], rows: int, chunk: int) -> dict[str, float]:
    ap.bulk_session(conn)
    if 0 < have["actions_action"] and max(have.values()) <= rows:
        # The anchor row 1 was made from: the new, older rows continue the same timeline.
        t0 = conn.execute(
            "SELECT created_at + interval '20 seconds' FROM actions_action "
            "WHERE id = md5('a1')::uuid"
        ).fetchone()[0]
    else:
        ap.setup(conn)
        have, t0 = dict.fromkeys(have, 0), conn.execute("SELECT now()").fetchone()[0]
    fewest = min(have.values())
    print(f"loading up to {rows:,} rows per app (holding {fewest:,} or more) …", flush=True)
    started = time.monotonic()
    unlogged(conn)
    took = {"unlogged": time.monotonic() - started}
    if rows - fewest >= fewest:  # at least doubling: building the indexes afresh is cheaper
        drop_indexes(conn)  # (an interrupted load's stay dropped: made once, at the end)
    else:
        restore_indexes(url, conn)
    took["insert"] = insert(url, have, rows, t0, chunk)
    took["indexes"] = restore_indexes(url, conn)
    return took


def unlogged(conn) -> None:
    """The loaded tables, and every table that references them (PostgreSQL refuses an unlogged
    table a logged referrer), made UNLOGGED: their rows, and the indexes built on them, then
    write no WAL (half the load's writes, and its checkpoints). What the bench times are reads,
    the same on either kind; the cost is that a server crash empties them, and the next run loads
    again. One transaction, nothing to do once done. The small tables' foreign keys into the set
    (one of them closes a cycle: actions_action and actions_spendpermission reference each
    other) are dropped for the switch and made again after it, validated (the bench leaves
    those tables empty)."""
    found = [
        table
        for (table,) in conn.execute(
            """WITH RECURSIVE referrers(rel) AS (
                   SELECT unnest(%s::text[])::regclass
                   UNION SELECT c.conrelid::regclass FROM pg_constraint c
                         JOIN referrers r ON c.confrelid = r.rel WHERE c.contype = 'f')
               SELECT rel::text FROM referrers JOIN pg_class ON oid = rel
               WHERE relpersistence = 'p'""",
            [list(LOADED)],
        ).fetchall()
    ]
    if not found:
        return
    small = [table for table in found if table not in LOADED]
    keys = conn.execute(
        """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
           WHERE contype = 'f' AND conrelid::regclass::text = ANY(%s)
                 AND confrelid::regclass::text = ANY(%s)""",
        [small, found],
    ).fetchall()
    for table, name, _ in keys:
        conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
    # Referrers first: the history tables, then what they reference, then the small tables.
    for table in [*HISTORY.values(), *HISTORY, *small]:
        if table in found:
            conn.execute(f"ALTER TABLE {table} SET UNLOGGED")
    for table, name, definition in keys:
        conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    conn.commit()


def insert(url: str, have: dict[str, int], rows: int, t0, chunk: int) -> float:
    """Each app's rows after the `have` it holds up to `rows`, and their history, `chunk` rows a
    statement (bench/admin_pages.py's SQL), the apps side by side on `WORKERS` connections and
    each app's statements in order (an interrupted load goes on from its row count); the
    seconds."""
    began, lock = time.monotonic(), threading.Lock()
    spent = dict.fromkeys(ap.APP_SQL, 0.0)
    queues = [
        [(table, lo, min(rows, lo + chunk - 1)) for lo in range(have[table] + 1, rows + 1, chunk)]
        for table in ap.APP_SQL
    ]

    def run(worker, job: tuple[str, int, int]) -> None:
        table, lo, hi = job
        started = time.monotonic()
        worker.execute(ap.APP_SQL[table], {"lo": lo, "hi": hi, "t0": t0})
        worker.commit()
        with lock:
            spent[table] += time.monotonic() - started

    in_parallel(url, queues, run)
    for table, took in spent.items():
        made = 4 * max(0, rows - have[table])  # each row and its three history rows
        if made:
            print(
                f"  {table} {have[table] + 1:,}..{rows:,} and history: {took:.1f} s, "
                f"{made / max(took, 1e-3):,.0f} rows/s",
                flush=True,
            )
    took = time.monotonic() - began
    made = 4 * sum(max(0, rows - n) for n in have.values())
    print(
        f"  inserted {made:,} rows in {took:.1f} s: {made / max(took, 1e-3):,.0f} rows/s",
        flush=True,
    )
    return took


def in_parallel(url: str, queues: list[list], run) -> None:
    """run(connection, job) for every job of `queues`, on `WORKERS` connections of their own,
    each reniced, with the loading settings: a queue's jobs one after another (an app's
    statements in order), different queues at once, the one with the most jobs left first (the
    first of equals)."""
    queues = [list(queue) for queue in queues]
    lock, busy, failed = threading.Lock(), set(), []

    def take():
        with lock:
            free = [i for i, queue in enumerate(queues) if queue and i not in busy]
            if failed or not free:
                return None
            i = max(free, key=lambda i: len(queues[i]))
            busy.add(i)
            return i, queues[i].pop(0)

    def work() -> None:
        with psycopg.connect(url) as worker:
            lowest_priority(worker)
            ap.bulk_session(worker)
            # Room for the largest index sorts in memory (WORKERS at a time).
            worker.execute("SET maintenance_work_mem = '1GB'")
            worker.commit()
            while (taken := take()) is not None:
                i, job = taken
                try:
                    run(worker, job)
                except BaseException:
                    failed.append(i)
                    raise
                finally:
                    with lock:
                        busy.discard(i)

    with ThreadPoolExecutor(WORKERS) as pool:
        for future in [pool.submit(work) for _ in range(WORKERS)]:
            future.result()


def targets(conn, row: int) -> list[tuple]:
    """(name, path, headers) of each path timed, on row `row`'s action and owner."""
    action = str(conn.execute("SELECT md5('a' || %s)::uuid", [row]).fetchone()[0])
    username = conn.execute(
        "SELECT u.username FROM actions_action a JOIN auth_user u ON u.id = a.user_id "
        "WHERE a.id = %s",
        [action],
    ).fetchone()[0]
    token = agent_token(conn, action)
    return [
        (BASELINE, "/admin/password_change/", {}),
        ("status read by id (API)", f"/api/v1/actions/{action}", {"Authorization": f"Bearer {token}"}),
        ("console home", "/staff/", {}),
        ("console search: action id", f"/staff/search/?q={action}", {}),
        ("console search: username", f"/staff/search/?q={username}", {}),
    ]  # fmt: skip


def measure(url: str, env: dict[str, str], password: str, work: list[tuple], rounds: int):
    """{name: [ms, …]}: `rounds` rounds of every path in a shuffled order, after two warm-up
    requests each (which must answer 200)."""
    server, base = serve_wsgi(ROOT, {**env, "DATABASE_URL": url})
    try:
        session = ap.login(base, password)
        for name, path, headers in work:
            for _ in range(2):
                response = session.get(base + path, headers=headers, timeout=120)
                if response.status_code != 200:
                    raise SystemExit(f"{name} {path}: HTTP {response.status_code}")
        samples: dict[str, list[float]] = {name: [] for name, _, _ in work}
        order = list(work)
        for round_no in range(rounds):
            random.shuffle(order)
            for name, path, headers in order:
                began = time.perf_counter()
                response = session.get(base + path, headers=headers, timeout=120)
                samples[name].append((time.perf_counter() - began) * 1000)
                assert response.status_code == 200, (path, response.status_code)
            print(f"  round {round_no + 1}/{rounds}", flush=True)
        return samples
    finally:
        stop_server(server)


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def drop(url: str) -> None:
    server, name = url.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as root:
        root.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database", default="bench_growth")
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--chunk", type=int, default=ap.CHUNK, help="rows per INSERT statement")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    if not 0 < args.small < args.large:
        raise SystemExit("--small must be positive and below --large")

    server_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not server_url.startswith("postgres"):
        raise SystemExit("this bench needs PostgreSQL: DATABASE_URL=postgres://…")
    url = server_url.rsplit("/", 1)[0] + "/" + args.database[:63]
    print(machine(), flush=True)
    env = {
        **os.environ,
        **server_env(Path(tempfile.mkdtemp(prefix="bench-growth-"))),
        "PUBLIC_BASE_URL": PUBLIC_BASE_URL,
        "LOG_LEVEL": "WARNING",
    }
    password = secrets.token_urlsafe(16)
    started = time.monotonic()
    sizes = {"small": args.small, "large": args.large}
    samples, notes = {}, {}
    try:
        create_database(url)
        migrate_and_collect(ROOT, {**env, "DATABASE_URL": url})
        with psycopg.connect(url) as conn:
            print(lowest_priority(conn), flush=True)
            if set(ap.counts(conn).values()) == {args.large}:
                ap.setup(conn)  # a kept large database: start again from --small
            ap.staff_user(conn, password)
        for size, rows in sizes.items():
            with psycopg.connect(url) as conn:
                lowest_priority(conn)
                began, load_before = time.monotonic(), load_average()
                took = grow(url, conn, rows, args.chunk)
                ap.staff_user(conn, password)  # SETUP_SQL keeps it; a fresh copy may lack it
                work = targets(conn, min(TARGET_ROW, args.small))
                db_size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            steps = ", ".join(f"{k} {v:.0f} s" for k, v in took.items()) or "reused"
            notes[size] = (
                f"{rows:,} rows per app ({12 * rows:,} with history, {db_size / 1e9:.1f} GB): "
                f"{time.monotonic() - began:.0f} s ({steps}); load average {load_before} before"
            )
            print(notes[size], flush=True)
            notes[size] += f", {load_average()} before timing"
            samples[size] = measure(url, env, password, work, args.rounds)
            notes[size] += f", {load_average()} after"
    finally:
        if not args.keep:
            drop(url)

    small, large = f"{args.small:,}", f"{args.large:,}"
    print()
    for size in sizes:
        print(f"{size}: {notes[size]}")
    print()
    print(f"| path | p50 / p99 ms at {small} | p50 / p99 ms at {large} | growth p50 | growth p99 |")
    print("|---|---|---|---|---|")
    factors = []
    for name, _, _ in work:
        a, b = samples["small"][name], samples["large"][name]
        p50a, p99a, p50b, p99b = (
            statistics.median(a), percentile(a, 99), statistics.median(b), percentile(b, 99)
        )  # fmt: skip
        if name != BASELINE:
            factors.append(p50b / p50a)
        print(
            f"| {name} | {p50a:.1f} / {p99a:.1f} | {p50b:.1f} / {p99b:.1f} | "
            f"{p50b / p50a:.2f}× | {p99b / p99a:.2f}× |"
        )
    print()
    print(
        f"growth factor {large}/{small} rows per app at p50: {min(factors):.2f}× to "
        f"{max(factors):.2f}× (baseline row: the machine's own change); {args.rounds} rounds, "
        f"run took {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
