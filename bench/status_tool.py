"""get_action_status over HTTP against the production web server next to its baseline, a bare
DRF view with the same OAuth2 authentication and scope check (`bench/status_urls.py`), both
served by the same server in this run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/status_tool.py [--server asgi|wsgi] [--actions 200000] [--rounds 10] [--requests 200] [--warm 100]

`--server asgi` (the default) is the Procfile's web process: `gunicorn -c picnic/gunicorn_conf.py
picnic.asgi:application` (2 uvicorn workers, pooled database connections); `--server wsgi` is
gunicorn's sync workers on `picnic.wsgi` with persistent connections (what the first passes of
the scale work measured). DEBUG off either way.

Makes its own database (bench_hot_status, or `--database`): `--actions` copies of an executed action with its
five history rows, made in SQL, and the one the requests read. Rounds alternate which endpoint
goes first; each request opens its own connection. Prints the SQL statements and the CPU of one
request of each (in process, through the whole middleware stack), p50/p95/p99 latencies and the
ratios last.
"""

from __future__ import annotations

import argparse
import http.client
import secrets
import sys
import time
from pathlib import Path

from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    PYTHON,
    ROOT,
    bench_agent,
    copy_rows,
    drop_database,
    free_port,
    machine,
    percentile,
    setup_django,
    start,
    stop,
    wait_for_port,
)


def make_data(copies: int):
    from django.db import connection

    from actions.execution.models import ACTION_LIFECYCLE, ActionStatus
    from actions.tests.factories import make_action
    from core.lifecycle import Actor, transition

    user, application, token = bench_agent(scope="read:actions")
    action = make_action(user=user, application=application, ttl_seconds=3600)
    for step in (ActionStatus.SIGNED, ActionStatus.SUBMITTED, ActionStatus.BROADCAST):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.worker())
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.EXECUTED,
        actor=Actor.worker(),
        updates={"tx_hash": "0x" + "ab" * 32, "block_number": 12},
        detail="included in block 12",
    )
    if copies:
        copy_rows(
            "actions_action",
            action.pk,
            copies,
            fresh={
                "id": "gen_random_uuid()",
                "user_op_hash": "'0x' || md5(n::text) || md5((n + 1)::text)",
                "tx_hash": "'0x' || md5((n + 2)::text) || md5((n + 3)::text)",
            },
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO actions_actionstatushistory (action_id, from_status, status, "
                "timestamp, detail, actor_kind, actor_user_id, payload, trace_id) "
                "SELECT a.id, h.from_status, h.status, h.timestamp, h.detail, h.actor_kind, "
                "h.actor_user_id, h.payload, h.trace_id FROM actions_action a, actions_actionstatushistory h "
                "WHERE h.action_id = %s AND a.id <> %s",
                [action.pk, action.pk],
            )
            cursor.execute("ANALYZE")
    return action, token


def statements_per_request(paths: list[str], token: str) -> dict[str, int]:
    from django.db import connection
    from django.test import Client, override_settings
    from django.test.utils import CaptureQueriesContext

    counts = {}
    with override_settings(ROOT_URLCONF="bench.status_urls"):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
        for path in paths:
            client.get(path)  # warm
            with CaptureQueriesContext(connection) as queries:
                assert client.get(path).status_code == 200
            counts[path] = len(queries.captured_queries)
    return counts


def cpu_per_request(
    paths: list[str], token: str, rounds: int = 5, n: int = 300, warm: int = 50
) -> dict:
    """CPU time of one request of each path in this process (Django's test client through the
    whole middleware stack, logs to /dev/null), rounds interleaved: the steadier figure on a
    shared machine."""
    import logging
    import os

    from django.test import Client, override_settings

    handlers = [h for h in logging.getLogger().handlers if hasattr(h, "setStream")]
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    streams = [h.setStream(devnull) for h in handlers]
    samples: dict[str, list[float]] = {path: [] for path in paths}
    try:
        with override_settings(ROOT_URLCONF="bench.status_urls", DEBUG=False):
            client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
            for path in paths:  # warm
                for _ in range(warm):
                    client.get(path)
            for _ in range(rounds):
                for path in paths:
                    started = time.process_time()
                    for _ in range(n):
                        client.get(path)
                    samples[path].append((time.process_time() - started) * 1000 / n)
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)
        devnull.close()
    return {path: percentile(values, 50) for path, values in samples.items()}


def get(port: int, path: str, token: str, timeout: float = 10) -> float:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise RuntimeError(f"{path}: HTTP {response.status} {body[:200]!r}")
    return elapsed * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server", choices=["asgi", "wsgi"], default="asgi")
    parser.add_argument("--actions", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--warm", type=int, default=100, help="unmeasured requests per endpoint first"
    )
    parser.add_argument(
        "--database", default="bench_hot_status", help="the throwaway database's name"
    )
    args = parser.parse_args()

    print(machine())
    print(f"server: {args.server}")
    db_url = setup_django(args.database)
    try:
        started = time.monotonic()
        action, token = make_data(args.actions)
        print(
            f"data: {args.actions + 1} actions, history x5, in {time.monotonic() - started:.0f} s"
        )
        paths = {"bare": f"/bench/bare/{action.pk}", "status": f"/api/v1/actions/{action.pk}"}
        counts = statements_per_request(list(paths.values()), token.token)
        cpu = cpu_per_request(
            list(paths.values()), token.token, n=3 * args.warm, warm=args.warm // 2 or 1
        )
        for name, path in paths.items():
            print(
                f"{name}: {counts[path]} SQL statements, {cpu[path]:.2f} ms CPU per request "
                f"(in process, median of 5 x {3 * args.warm})"
            )
        port = free_port()
        if args.server == "asgi":
            command = ["-c", "picnic/gunicorn_conf.py", "picnic.asgi:application"]
            extra = {"WEB_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "2"}
        else:
            command = ["picnic.wsgi", "--workers", "2", "--bind", f"127.0.0.1:{port}"]
            command += ["--log-level", "warning"]
            extra = {}
        server = start(
            [PYTHON, "-m", "gunicorn", *command],
            env={
                "DJANGO_SETTINGS_MODULE": "bench.status_settings",
                "PYTHONPATH": str(ROOT),
                "DATABASE_URL": db_url,
                "DJANGO_DEBUG": "false",
                "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
                "SPEND_PERMISSION_KEYS": Fernet.generate_key().decode(),
                **extra,
            },
            log=Path("/tmp") / f"bench-status-gunicorn-{port}.log",
        )
        try:
            wait_for_port(port)
            samples: dict[str, list[float]] = {"bare": [], "status": []}
            # The master listens before its workers have imported Django (slow on a loaded
            # machine): the first answer may take a while.
            get(port, paths["bare"], token.token, timeout=120)
            for path in paths.values():  # warm both workers
                for _ in range(args.warm):
                    get(port, path, token.token)
            for round_no in range(args.rounds):
                order = list(paths) if round_no % 2 == 0 else list(reversed(paths))
                for name in order:
                    for _ in range(args.requests):
                        samples[name].append(get(port, paths[name], token.token))
        finally:
            stop(server)
    finally:
        drop_database()

    for name, values in samples.items():
        print(
            f"{name}: p50 {percentile(values, 50):.2f} ms, p95 {percentile(values, 95):.2f} ms, "
            f"p99 {percentile(values, 99):.2f} ms over {len(values)} requests"
        )
    for p in (50, 99):
        ratio = percentile(samples["status"], p) / percentile(samples["bare"], p)
        print(f"ratio p{p} get_action_status/bare: {ratio:.2f}")


if __name__ == "__main__":
    main()
