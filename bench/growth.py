"""How every staff page's cost grows with the data: two PostgreSQL databases filled by
bench/admin_pages.py's SQL, one with --small rows per app (actions, DM deliveries, operations,
each with 3 history rows) and one with --large, each served by its own gunicorn (`picnic.wsgi`,
2 sync workers, DEBUG off), timed in one run in alternating blocks of --block rounds (small
then large, then large then small, …), so both sizes see the same machine. Each round asks every
page once in a shuffled order, as a logged-in staff user: the admin index, every admin
changelist (and its filters and searches on the three big models), a change page per model that
has a row, every support-console page (home, list partial, saved views, filter, CSV exports,
each kind of search, the smart-account one included), the staff timelines of an action, a
delivery and an operation, the operations review queue, and an agent's status read through the
API; the baseline is the staff password-change form (session and user, no table read). The
pages read the same rows at both sizes (row 1,000 or so of each app and its owner, a few hours
old; the rows beyond --small are older). Prints p50/p95 per page and size, the p95 growth
large / small, that growth divided by the baseline's (a page whose data access grows shows
above 1.2; the noise of a shared machine shows too), each answer's size in bytes (a page that
shows more rows at the large size says so there), and the generation's time and rate.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/growth.py --database bench_growth \
        [--small 1000000] [--large 10000000] [--rounds 30] [--block 5] [--warm 2] \
        [--chunk 250000] [--only TEXT] [--keep]

The databases are `<database>_s` and `<database>_l`: the first made (or copied from
$BENCH_TEMPLATE_DATABASE) and migrated when missing, the second a copy of it before any row is
loaded. Rows are made in SQL (`INSERT … SELECT … FROM generate_series`, --chunk rows a
statement), the three apps side by side on two connections (each app's statements in order);
the loaded tables, and the tables that reference them, are switched to UNLOGGED first (no WAL:
the bench database is throwaway, and the reads it times are the same on either kind). While a
load at least doubles the tables, their non-unique indexes are dropped and then made again,
two at a time, from the definitions PostgreSQL printed for them (kept in a table of the
database first, so an interrupted run restores them on its next start). Then VACUUM ANALYZE,
two tables at a time. On a local server the loading backends run at the lowest CPU priority
(renice 19, and ionice idle where the disk scheduler honours it). Kept databases (--keep) are
reused while they hold --small and --large rows per app (and migrated first).
"""

from __future__ import annotations

import argparse
import hashlib
import json
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
import console_pages as cp  # noqa: E402 - the console's pages

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
# A page's p95 may grow at most this much more than the baseline's between the two sizes.
GROWTH_GOAL = 1.2
# Loading connections: one per core of the 2-core machine, each at the lowest priority.
WORKERS = 2


def agent_token(conn, action_id: str, token: str | None = None) -> str:
    """A bearer token (`token`, or a new one) of the action's owner, for the bench agent
    application (admin_pages' `bench`), stored as django-oauth-toolkit stores one (the lookup
    is by checksum)."""
    token = token or secrets.token_urlsafe(32)
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
        worker.execute(ap.APP_SQL[table], ap.app_params(lo, hi, t0))
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


def admin_models() -> list[tuple[str, str, str, str]]:
    """(name, admin path, table, primary key column) of every model the admin site registers
    (this checkout's)."""
    import django

    django.setup()
    from django.contrib import admin

    return sorted(
        (
            model._meta.label,
            f"/admin/{model._meta.app_label}/{model._meta.model_name}/",
            model._meta.db_table,
            model._meta.pk.column,
        )
        for model in admin.site._registry
    )


def targets(conns: dict[str, psycopg.Connection], row: int) -> list[tuple]:
    """(name, path, headers) of every page timed, the same path at both sizes: the staff pages
    on row `row` of each app (and its owner), which both databases hold, the same recent rows."""
    conn = conns["small"]
    action, delivery, operation = (
        str(conn.execute(f"SELECT md5('{p}' || %s)::uuid", [row]).fetchone()[0]) for p in "ado"
    )
    username = conn.execute(
        "SELECT u.username FROM actions_action a JOIN auth_user u ON u.id = a.user_id "
        "WHERE a.id = %s",
        [action],
    ).fetchone()[0]
    token = agent_token(conn, action)
    agent_token(conns["large"], action, token)
    pages = [
        (BASELINE, "/admin/password_change/", {}),
        ("API: status read by id", f"/api/v1/actions/{action}", {"Authorization": f"Bearer {token}"}),
        ("timeline: action", f"/staff/actions/{action}/", {}),
        ("timeline: delivery", f"/staff/deliveries/{delivery}/", {}),
        ("timeline: operation", f"/staff/operations/{operation}/", {}),
        ("review queue", "/staff/operations/review/", {}),
        ("console search: username of the row", f"/staff/search/?q={username}", {}),
    ]  # fmt: skip
    pages += [(f"console {name}", path, headers) for name, path, headers in cp.pages(conn)]
    big = ap.targets(row * 2, row)  # the admin bench's pages, on `row`
    pages += [(f"admin {name}", path, {}) for name, path in big]
    covered = {path for _, path in big}
    for label, path, table, pk in admin_models():
        if path in covered:
            continue
        pages.append((f"admin {label}: changelist", path, {}))
        first = {
            c.execute(f'SELECT "{pk}" FROM "{table}" ORDER BY 1 LIMIT 1').fetchone()  # noqa: S608
            for c in conns.values()
        }
        if len(first) == 1 and None not in first:  # the same row in both databases
            pages.append((f"admin {label}: change page", f"{path}{first.pop()[0]}/change/", {}))
    return pages


def check(name: str, path: str, response, must_show: str) -> None:
    """A warm-up answer: 200 (after any redirect), a change page that is the row's own (a
    missing row redirects to the index), a search that shows what it looks for."""
    if response.status_code != 200:
        raise SystemExit(f"{name} {path}: HTTP {response.status_code}")
    if "change page" in name and not response.url.endswith(path):
        raise SystemExit(f"{name} {path}: redirected to {response.url}")
    if must_show not in response.text:
        raise SystemExit(f"{name} {path}: {must_show} not found")


def measure(servers: dict, work: list[tuple], rounds: int, block: int, warm: int, must_show: dict):
    """({size: {name: [ms, …]}}, {size: {name: bytes}}): every page once per round in a
    shuffled order, the sizes in alternating blocks of `block` rounds (the first size of a
    block alternates too), after `warm` warm-up requests of each page on each size. The
    answers of the first request of each page on each size are checked (`check`) and their
    sizes kept; with no warm-up, those of the first round."""
    samples = {size: {name: [] for name, _, _ in work} for size in servers}
    sizes = {size: {} for size in servers}

    def get(size: str, name: str, path: str, headers: dict):
        base, session = servers[size]
        began = time.perf_counter()
        response = session.get(base + path, headers=headers, timeout=120)
        response.content  # noqa: B018 - a CSV streams: read it all
        took = (time.perf_counter() - began) * 1000
        if name not in sizes[size]:
            check(name, path, response, must_show.get(name, ""))
            sizes[size][name] = len(response.content)
        assert response.status_code == 200, (path, response.status_code)
        return took

    for size in servers:
        for name, path, headers in work:
            for _ in range(warm):
                get(size, name, path, headers)
    done = 0
    while done < rounds:
        order = list(servers) if (done // block) % 2 == 0 else list(reversed(servers))
        n = min(block, rounds - done)
        for size in order:
            for _ in range(n):
                for name, path, headers in random.sample(work, len(work)):
                    samples[size][name].append(get(size, name, path, headers))
        done += n
        print(f"  rounds {done}/{rounds} at both sizes, load {load_average()}", flush=True)
    return samples, sizes


def explain(urls: dict[str, str], work: list[tuple]) -> None:
    """Each page's statements at each size, rendered in this process (Django's test client, the
    staff user, redirects followed) and each SELECT run again under EXPLAIN ANALYZE: how many
    and their summed execution time, the slowest, and the most rows a plan node returned. What
    the database does for a page, apart from the rendering and from the machine's load."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    found: dict[str, dict[str, tuple]] = {}
    for size, url in urls.items():
        connection.close()
        connection.settings_dict["NAME"] = url.rsplit("/", 1)[1]
        client = Client()
        client.force_login(get_user_model().objects.get(username=ap.STAFF))
        for name, path, headers in work:
            if "Authorization" in headers:
                continue  # the API's bearer token is bound to the served origin
            client.get(path, headers=headers, follow=True)
            with CaptureQueriesContext(connection) as captured:
                client.get(path, headers=headers, follow=True)
            total, slowest, most = 0.0, 0.0, 0
            for query in captured:
                if not query["sql"].lstrip().upper().startswith("SELECT"):
                    continue
                with connection.cursor() as cursor:
                    cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query["sql"])
                    plan = cursor.fetchone()[0]
                plan = json.loads(plan) if isinstance(plan, str) else plan
                total += plan[0]["Execution Time"]
                slowest = max(slowest, plan[0]["Execution Time"])
                nodes = [plan[0]["Plan"]]
                while nodes:
                    node = nodes.pop()
                    most = max(most, node.get("Actual Rows", 0) * node.get("Actual Loops", 1))
                    nodes.extend(node.get("Plans", []))
            found.setdefault(name, {})[size] = (len(captured), total, slowest, most)
    print("| page | statements | SQL ms (sum) | slowest statement ms | most rows of a plan node |")
    print("|---|---|---|---|---|")
    for name, at in found.items():
        (n_a, t_a, s_a, r_a), (n_b, t_b, s_b, r_b) = at["small"], at["large"]
        print(
            f"| {name} | {n_a} → {n_b} | {t_a:.2f} → {t_b:.2f} | {s_a:.2f} → {s_b:.2f} "
            f"| {r_a:,} → {r_b:,} |"
        )
    print()
    print(f"explained {len(found)} pages at both sizes")


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def drop(url: str) -> None:
    server, name = url.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as root:
        root.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def copy_schema(source: str, url: str) -> bool:
    """Make the database of `url`, when missing, a copy of `source` (just migrated, not loaded
    yet, or a kept one: `grow` then loads or grows it); whether it was there already."""
    server, name = url.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as root:
        if root.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return True
        root.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source.rsplit("/", 1)[1]}"')
    return False


def migrate(url: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env={**env, "DATABASE_URL": url},
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database", default="bench_growth")
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--large", type=int, default=10_000_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--block", type=int, default=5, help="rounds of one size in a row")
    parser.add_argument("--warm", type=int, default=2, help="checked requests before timing")
    parser.add_argument("--chunk", type=int, default=ap.CHUNK, help="rows per INSERT statement")
    parser.add_argument("--only", default="", help="time only the pages whose name has this")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument(
        "--explain", action="store_true", help="EXPLAIN ANALYZE each page's statements instead"
    )
    args = parser.parse_args()
    if not 0 < args.small < args.large:
        raise SystemExit("--small must be positive and below --large")
    if args.rounds < 1 or args.warm < 0:
        raise SystemExit("--rounds must be positive, --warm not negative")

    server_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not server_url.startswith("postgres"):
        raise SystemExit("this bench needs PostgreSQL: DATABASE_URL=postgres://…")
    sizes = {"small": args.small, "large": args.large}
    urls = {
        size: server_url.rsplit("/", 1)[0] + "/" + f"{args.database[:57]}_{size[0]}"
        for size in sizes
    }
    print(machine(), flush=True)
    env = {
        **os.environ,
        **server_env(Path(tempfile.mkdtemp(prefix="bench-growth-"))),
        "PUBLIC_BASE_URL": PUBLIC_BASE_URL,
        "LOG_LEVEL": "WARNING",
    }
    password = secrets.token_urlsafe(16)
    started = time.monotonic()
    notes, servers = {}, {}
    try:
        create_database(urls["small"])
        migrate_and_collect(ROOT, {**env, "DATABASE_URL": urls["small"]})
        if copy_schema(urls["small"], urls["large"]):
            migrate(urls["large"], env)  # a kept one: this checkout's migrations
        for size, rows in sizes.items():
            url = urls[size]
            with psycopg.connect(url) as conn:
                print(f"{size}: {lowest_priority(conn)}", flush=True)
                began, load_before = time.monotonic(), load_average()
                if max(ap.counts(conn).values()) > rows:
                    ap.setup(conn)  # a kept database of another size: start again
                took = grow(url, conn, rows, args.chunk)
                ap.staff_user(conn, password)
                db_size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
            steps = ", ".join(f"{k} {v:.0f} s" for k, v in took.items()) or "reused"
            notes[size] = (
                f"{rows:,} rows per app ({12 * rows:,} with history, {db_size / 1e9:.2f} GB): "
                f"{time.monotonic() - began:.0f} s ({steps}); load average {load_before} before"
            )
            print(notes[size], flush=True)
        row = ap.target_row(min(TARGET_ROW, args.small // 2))
        conns = {size: psycopg.connect(url, autocommit=True) for size, url in urls.items()}
        try:
            work = [page for page in targets(conns, row) if args.only in page[0]]
            if BASELINE not in [name for name, _, _ in work]:
                work.insert(0, (BASELINE, "/admin/password_change/", {}))
        finally:
            for conn in conns.values():
                conn.close()
        must_show = {f"admin {k}": v for k, v in ap.expected(row * 2, row).items()}
        print(f"{len(work)} pages; load average {load_average()} before timing", flush=True)
        if args.explain:
            explain(urls, work)
            return
        # Both servers start at once (most of a tiny run is their start-up).
        with ThreadPoolExecutor(len(urls)) as pool:
            starting = {
                size: pool.submit(serve_wsgi, ROOT, {**env, "DATABASE_URL": url})
                for size, url in urls.items()
            }
        processes = [f.result()[0] for f in starting.values() if f.exception() is None]
        try:
            for size, future in starting.items():
                server, base = future.result()  # the first failure, once all are stopped
                servers[size] = (base, ap.login(base, password))
            samples, answers = measure(servers, work, args.rounds, args.block, args.warm, must_show)
        finally:
            for server in processes:
                stop_server(server)
        timed = load_average()
    finally:
        if not args.keep:
            for url in urls.values():
                drop(url)

    small, large = f"{args.small:,}", f"{args.large:,}"
    print()
    for size in sizes:
        print(f"{size}: {notes[size]}")
    print(f"timed in alternating blocks of {args.block} rounds; load average {timed} after")
    print()

    def growth(name: str, q: float) -> float:
        a, b = samples["small"][name], samples["large"][name]
        return percentile(b, q) / percentile(a, q)

    base50, base95 = growth(BASELINE, 50), growth(BASELINE, 95)
    print(
        f"| page | p50 / p95 ms at {small} | p50 / p95 ms at {large} | growth p95 "
        "| p95 growth ÷ baseline's | p50 growth ÷ baseline's | bytes |"
    )
    print("|---|---|---|---|---|---|---|")
    relative = {}
    for name, _, _ in work:
        a, b = samples["small"][name], samples["large"][name]
        relative[name] = (growth(name, 95) / base95, growth(name, 50) / base50)
        p95, p50 = (f"**{x:.2f}**" if x > GROWTH_GOAL else f"{x:.2f}" for x in relative[name])
        bytes_a, bytes_b = answers["small"][name], answers["large"][name]
        shown = f"{bytes_a:,}" if bytes_a == bytes_b else f"{bytes_a:,} → {bytes_b:,}"
        print(
            f"| {name} | {statistics.median(a):.1f} / {percentile(a, 95):.1f} | "
            f"{statistics.median(b):.1f} / {percentile(b, 95):.1f} | {growth(name, 95):.2f}× | "
            f"{p95} | {p50} | {shown} |"
        )
    pages = [name for name, _, _ in work if name != BASELINE]
    if not pages:  # --only matched the baseline alone (a load, say): nothing to compare
        return
    within = [name for name in pages if relative[name][0] <= GROWTH_GOAL]
    # The same answer give or take an age or a count's digits: within 1 %.
    same = [
        name for name in pages if abs(answers["large"][name] / answers["small"][name] - 1) <= 0.01
    ]
    flat = [name for name in same if relative[name][0] <= GROWTH_GOAL]
    slowest = max(percentile(samples["large"][name], 95) for name in pages)
    print()
    print(
        f"growth factor {large}/{small} rows per app at p95, ÷ the baseline's "
        f"({base95:.2f}×): {min(relative[n][0] for n in pages):.2f} to "
        f"{max(relative[n][0] for n in pages):.2f}; {len(within)} of {len(pages)} pages within "
        f"{GROWTH_GOAL}× ({len(flat)} of the {len(same)} whose answer has about the same size at both); "
        f"slowest p95 at {large}: {slowest:.0f} ms; {args.rounds} rounds, "
        f"run took {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
