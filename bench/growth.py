"""How the hot paths' cost grows with the data: an agent's status read by public id through the
API (`GET /api/v1/actions/<id>`, bearer token), the support console's home and its search (by
action id, by username), on two PostgreSQL databases filled by bench/admin_pages.py's SQL: one
with --small rows per app (actions, DM deliveries, operations, each with 3 history rows), one
with --large. One gunicorn each (`picnic.wsgi`, 2 sync workers, DEBUG off); the rounds
interleave both databases and every path in a shuffled order. Prints p50/p99 per path and size
and the growth factor large / small.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/growth.py --database bench_growth \
        [--small 1000000] [--large 10000000] [--rounds 30] [--keep]

The databases are `<database>_small` and `<database>_large`, made (or copied from
$BENCH_TEMPLATE_DATABASE) and migrated when missing, filled in SQL (generate_series) when
their row counts differ, and dropped at the end unless --keep (a kept one is reused while its
counts match: generating 1M rows per app takes minutes, 10M about ten times as long).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
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


def prepare(url: str, rows: int, env: dict[str, str], password: str) -> list[tuple]:
    """The database of `url` migrated and filled with `rows` per app: (name, path, headers)."""
    create_database(url)
    migrate_and_collect(ROOT, {**env, "DATABASE_URL": url})
    with psycopg.connect(url) as conn:
        have = ap.counts(conn)
        if any(n != rows for n in have.values()):
            print(f"{url.rsplit('/', 1)[1]}: generating {rows:,} rows per app …", flush=True)
            started = time.monotonic()
            ap.generate(conn, rows)
            print(f"  generated in {time.monotonic() - started:.0f} s", flush=True)
        ap.staff_user(conn, password)
        # A row a few hours old: an older finished one is past retention, and not found.
        action = str(
            conn.execute("SELECT md5('a' || %s)::uuid", [str(min(1000, rows))]).fetchone()[0]
        )
        username = conn.execute(
            "SELECT u.username FROM actions_action a JOIN auth_user u ON u.id = a.user_id "
            "WHERE a.id = %s",
            [action],
        ).fetchone()[0]
        token = agent_token(conn, action)
    return [
        ("status read by id (API)", f"/api/v1/actions/{action}", {"Authorization": f"Bearer {token}"}),
        ("console home", "/staff/", {}),
        ("console search: action id", f"/staff/search/?q={action}", {}),
        ("console search: username", f"/staff/search/?q={username}", {}),
    ]  # fmt: skip


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
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    server_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not server_url.startswith("postgres"):
        raise SystemExit("this bench needs PostgreSQL: DATABASE_URL=postgres://…")
    sizes = {"small": args.small, "large": args.large}
    urls = {
        size: server_url.rsplit("/", 1)[0] + "/" + f"{args.database}_{size}"[-63:] for size in sizes
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
    servers = {}
    try:
        targets = {size: prepare(urls[size], rows, env, password) for size, rows in sizes.items()}
        print(f"data ready in {time.monotonic() - started:.0f} s", flush=True)
        sessions = {}
        for size in sizes:
            servers[size] = serve_wsgi(ROOT, {**env, "DATABASE_URL": urls[size]})
            sessions[size] = ap.login(servers[size][1], password)
        work = [(size, *target) for size in sizes for target in targets[size]]
        for size, name, path, headers in work:  # warm both workers up, check each
            for _ in range(2):
                response = sessions[size].get(servers[size][1] + path, headers=headers, timeout=120)
                if response.status_code != 200:
                    raise SystemExit(f"{size} {name} {path}: HTTP {response.status_code}")
        samples: dict[tuple[str, str], list[float]] = {(s, n): [] for s, n, _, _ in work}
        for round_no in range(args.rounds):
            random.shuffle(work)
            for size, name, path, headers in work:
                began = time.perf_counter()
                response = sessions[size].get(servers[size][1] + path, headers=headers, timeout=120)
                samples[size, name].append((time.perf_counter() - began) * 1000)
                assert response.status_code == 200, (size, path, response.status_code)
            print(f"  round {round_no + 1}/{args.rounds}", flush=True)
    finally:
        for server, _ in servers.values():
            stop_server(server)
        if not args.keep:
            for url in urls.values():
                drop(url)

    small, large = f"{args.small:,}", f"{args.large:,}"
    print()
    print(f"| path | p50 / p99 ms at {small} | p50 / p99 ms at {large} | growth p50 | growth p99 |")
    print("|---|---|---|---|---|")
    factors = []
    for name, _, _ in targets["small"]:
        a, b = samples["small", name], samples["large", name]
        p50a, p99a, p50b, p99b = (
            statistics.median(a), percentile(a, 99), statistics.median(b), percentile(b, 99)
        )  # fmt: skip
        factors.append(p50b / p50a)
        print(
            f"| {name} | {p50a:.1f} / {p99a:.1f} | {p50b:.1f} / {p99b:.1f} | "
            f"{p50b / p50a:.2f}× | {p99b / p99a:.2f}× |"
        )
    print()
    print(
        f"growth factor {large}/{small} rows per app at p50: {min(factors):.2f}× to "
        f"{max(factors):.2f}×; {args.rounds} rounds, run took {time.monotonic() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
