"""The support console at production scale: its home (counts, 24 h charts, the needs-attention
list), its filters and saved views, the list partial, the CSV export and the one search box by
each kind of id, on PostgreSQL with ~1M rows per app and their history, served by gunicorn
(`picnic.wsgi`, 2 sync workers, DEBUG off) to a logged-in staff user.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_console \
        .venv/bin/python bench/console_pages.py [--rows 1000000] [--rounds 15] [--rebuild]

The data is bench/admin_pages.py's (generated in SQL, reused while the row counts match; a
first run copies an existing `bench_admin` database of the same size as a template when nobody
is connected to it, which takes a minute instead of generating). The baseline is a trivial
staff page (the password-change form) measured in the same rounds; pages are interleaved in a
shuffled order each round. Prints p50/p95 per page, the ratio to the baseline's p95, and
whether p95 < 150 ms, last.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import admin_pages as ap  # noqa: E402 - the data and the login of the admin bench

from bench.common import (  # noqa: E402
    create_database,
    migrate_and_collect,
    serve_wsgi,
    server_env,
    stop_server,
)

GOAL_MS = ap.GOAL_MS


def ensure_database(url: str, rows: int) -> None:
    server, name = url.rsplit("/", 1)
    with psycopg.connect(server + "/postgres", autocommit=True) as root:
        if root.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return
        template = root.execute(
            """SELECT 1 FROM pg_database WHERE datname = 'bench_admin'
               AND NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = 'bench_admin')"""
        ).fetchone()
        if template:
            with psycopg.connect(server + "/bench_admin") as conn:
                n = conn.execute("SELECT count(*) FROM operations_operation").fetchone()[0]
            if n == rows:
                print("copying bench_admin as a template …", flush=True)
                root.execute(f'CREATE DATABASE "{name}" TEMPLATE bench_admin')
                return
    create_database(url)


def pages(conn) -> list[tuple[str, str, dict]]:
    """(name, path, headers); search terms are real rows (read once, by index or LIMIT 1)."""

    def one(sql: str) -> str:
        return str(conn.execute(sql).fetchone()[0])

    tx_hash = one("SELECT tx_hash FROM actions_action WHERE tx_hash IS NOT NULL LIMIT 1")
    user_op = one("SELECT user_op_hash FROM actions_action WHERE user_op_hash IS NOT NULL LIMIT 1")
    action = one("SELECT id FROM actions_action LIMIT 1")
    key = one("SELECT idempotency_key FROM messaging_delivery LIMIT 1")
    message = one(
        "SELECT provider_message_id FROM messaging_delivery "
        "WHERE provider_message_id IS NOT NULL LIMIT 1"
    )
    operation = one("SELECT id FROM operations_operation LIMIT 1")
    account = one("SELECT smart_account FROM actions_action LIMIT 1")
    htmx = {"HX-Request": "true"}
    return [
        ("home", "/staff/", {}),
        ("home: list partial (htmx poll)", "/staff/", htmx),
        ("saved view: unknown DMs", "/staff/?kind=delivery&status=unknown", {}),
        ("saved view: stuck over an hour", "/staff/?older=60", {}),
        ("filter: owner", "/staff/?owner=benchuser17", {}),
        ("CSV export", "/staff/attention.csv", {}),
        ("search: tx hash", f"/staff/search/?q={tx_hash}", {}),
        ("search: userOpHash", f"/staff/search/?q={user_op}", {}),
        ("search: action id", f"/staff/search/?q={action}", {}),
        ("search: idempotency key", f"/staff/search/?q={key}", {}),
        ("search: provider message id", f"/staff/search/?q={quote(message)}", {}),
        ("search: operation id", f"/staff/search/?q={operation}", {}),
        ("search: smart account", f"/staff/search/?q={account}", {}),
        ("search: username", "/staff/search/?q=benchuser17", {}),
        ("search: request id", f"/staff/search/?q={secrets.token_hex(16)}", {}),
        ("search CSV: username", "/staff/search.csv?q=benchuser17", {}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()

    url = os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench_console")
    if not url.rsplit("/", 1)[-1].startswith("bench_console"):
        raise SystemExit("DATABASE_URL must name a bench_console* database (it is truncated)")
    ensure_database(url, args.rows)
    env = {**os.environ, **server_env(Path(tempfile.mkdtemp(prefix="bench-console-")))}
    print("migrating, collecting static files (DEBUG off serves the manifest's names) …")
    migrate_and_collect(ap.ROOT, env)
    with psycopg.connect(url) as conn:
        have = ap.counts(conn)
        if args.rebuild or any(n != args.rows for n in have.values()):
            print(f"generating {args.rows:,} rows per app (had {have}) …", flush=True)
            ap.generate(conn, args.rows)
        password = secrets.token_urlsafe(16)
        ap.staff_user(conn, password)
        targets = pages(conn)

    server, base = serve_wsgi(ap.ROOT, {**env, "LOG_LEVEL": "WARNING"})
    baseline = ("baseline: password-change form", "/admin/password_change/", {})
    try:
        session = ap.login(base, password)
        for name, path, headers in [baseline, *targets]:  # warm both workers up, check each
            for _ in range(2):
                response = session.get(base + path, headers=headers, timeout=120)
                if response.status_code != 200:
                    raise SystemExit(f"{name} {path}: HTTP {response.status_code}")
        samples: dict[str, list[float]] = {n: [] for n, _, _ in [baseline, *targets]}
        for round_no in range(args.rounds):
            order = [baseline, *targets]
            random.shuffle(order)
            for name, path, headers in order:
                started = time.perf_counter()
                response = session.get(base + path, headers=headers, timeout=120)
                response.content  # noqa: B018 - a CSV streams: read it all
                samples[name].append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (path, response.status_code)
            print(f"  round {round_no + 1}/{args.rounds}", flush=True)
    finally:
        stop_server(server)

    base_p95 = ap.pct(samples[baseline[0]], 0.95)
    print()
    print("| page | p50 ms | p95 ms | p95 / baseline | goal p95 < 150 ms |")
    print("|---|---|---|---|---|")
    met = 0
    for name, values in samples.items():
        p50, p95 = statistics.median(values), ap.pct(values, 0.95)
        ok = p95 < GOAL_MS
        met += ok and name != baseline[0]
        verdict = "met" if ok else "NOT met"
        print(f"| {name} | {p50:.1f} | {p95:.1f} | {p95 / base_p95:.2f}× | {verdict} |")
    print()
    print(
        f"{met} of {len(targets)} console pages meet p95 < {GOAL_MS:.0f} ms; baseline p95 "
        f"{base_p95:.1f} ms; {args.rounds} rounds, {os.cpu_count()} CPUs (shared)"
    )


if __name__ == "__main__":
    main()
