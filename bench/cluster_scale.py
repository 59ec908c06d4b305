"""What a second instance of each process type gives: the cluster on one machine
(dev/cluster.py: web, MCP, Celery workers per queue kind, beat, HAProxy in front) with 1 and
with 2 instances of each type, in one run, each on services of its own (a fresh database on
one PostgreSQL, Redis with AOF, a Redis broker: picnic/tests/chaos_world.py). Through HAProxy, for `--seconds`
each, `--clients` concurrent clients per kind:

- status reads: POST /private-messaging-api/actions/status (the API);
- DM sends: POST /private-messaging-api/actions/send with a fresh idempotency key (accepted =
  202; the workers deliver to the local X server behind);
- MCP tool calls: sosoapi_dm_actions_status with the official SDK client (MCP → API).

Prints throughput (requests/s) and p99 per kind for each size, then the ratios 2/1.

    .venv/bin/python bench/cluster_scale.py [--seconds 20] [--clients 4] [--instances 1,2]

The ratios need both sizes; `--instances 1` (CI's smoke run) starts one cluster, not two.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")

from bench.common import machine, percentile  # noqa: E402

KINDS = ("status read", "DM send", "MCP tool call")


def one_delivery(system) -> str:
    """A DM sent through the cluster: what the status reads read."""
    from dev import processes

    key = str(uuid.uuid4())
    body = {**system.dm_target, "text": f"bench {key}", "idempotency_key": key}
    status, _, raw = processes.http(
        "POST", f"{system.cluster.web_url}/private-messaging-api/actions/send", body=body,
        token=system.api_token,
    )  # fmt: skip
    assert status == 202, (status, raw)
    return json.loads(raw)["action"]["id"]


def measure(system, kind: str, seconds: float, clients: int, action_id: str):
    """(requests/s, p99 ms) of `clients` concurrent clients of one kind for `seconds`."""
    from dev import processes

    samples: list[float] = []
    errors: list[str] = []
    stop = time.monotonic() + seconds
    api = system.cluster.web_url

    def status_read() -> None:
        body = {**system.dm_account, "action_id": action_id}
        started = time.perf_counter()
        status, _, _ = processes.http(
            "POST", f"{api}/private-messaging-api/actions/status", body=body,
            token=system.api_token,
        )  # fmt: skip
        record(status == 200, started, status)

    def dm_send() -> None:
        key = str(uuid.uuid4())
        body = {**system.dm_target, "text": f"bench {key}", "idempotency_key": key}
        started = time.perf_counter()
        status, _, _ = processes.http(
            "POST", f"{api}/private-messaging-api/actions/send", body=body,
            token=system.api_token, headers={"Idempotency-Key": key},
        )  # fmt: skip
        record(status == 202, started, status)

    def record(ok: bool, started: float, status) -> None:
        if ok:
            samples.append((time.perf_counter() - started) * 1000)
        else:
            errors.append(str(status))

    # Each client makes at least one request, however long its start took (a tiny run on a
    # busy machine would otherwise measure nothing).
    def api_client(one) -> None:
        one()
        while time.monotonic() < stop:
            one()

    async def mcp_client() -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = {"Authorization": f"Bearer {system.mcp_token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http_client,
            Client(streamable_http_client(system.cluster.mcp_url, http_client=http_client)) as c,
        ):
            arguments = {**system.dm_account, "action_id": action_id}
            first = True
            while first or time.monotonic() < stop:
                first = False
                started = time.perf_counter()
                result = await c.call_tool("sosoapi_dm_actions_status", arguments)
                text = " ".join(getattr(part, "text", "") for part in result.content)
                record(not result.is_error, started, text[:80])

    if kind == "MCP tool call":
        targets = [lambda: anyio.run(mcp_client)] * clients
    else:
        one = status_read if kind == "status read" else dm_send
        targets = [lambda one=one: api_client(one)] * clients
    threads = [threading.Thread(target=t, daemon=True) for t in targets]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    elapsed = time.monotonic() - began
    if errors:
        print(f"  {kind}: {len(errors)} errors, e.g. {errors[:3]}")
    if not samples:
        raise SystemExit(f"{kind}: no request succeeded")
    return len(samples) / elapsed, percentile(samples, 99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--instances",
        type=lambda text: tuple(int(part) for part in text.split(",")),
        default=(1, 2),
        help="the sizes to start, comma-separated (default 1,2)",
    )
    args = parser.parse_args()

    import django

    django.setup()
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per MCP request otherwise
    from dev.cluster import PostgresServer
    from picnic.tests.chaos_world import world

    print(machine())
    results: dict[int, dict[str, tuple[float, float]]] = {}
    # One PostgreSQL server for both sizes, as the chaos test's brokers share one: each size
    # gets a fresh database on it, copied from the template the first migrated.
    postgres = PostgresServer().start()
    try:
        for instances in args.instances:
            with tempfile.TemporaryDirectory(prefix="picnic-cluster-bench-") as tmp:
                started = time.monotonic()
                with world(Path(tmp), "redis", instances=instances, postgres=postgres) as system:
                    up = time.monotonic() - started
                    print(f"{instances} instance(s) of each type up in {up:.0f}s")
                    action_id = one_delivery(system)
                    results[instances] = {
                        kind: measure(system, kind, args.seconds, args.clients, action_id)
                        for kind in KINDS
                    }
            for kind, (rate, p99) in results[instances].items():
                print(f"  {instances}x {kind:<14} {rate:8.1f} req/s   p99 {p99:8.1f} ms")
    finally:
        postgres.stop()
    if not {1, 2} <= set(results):
        print(f"one size only ({', '.join(map(str, results))} instance(s)): no ratio")
        return
    for kind in KINDS:
        (rate1, p99_1), (rate2, p99_2) = results[1][kind], results[2][kind]
        print(
            f"ratio 2/1 instances, {kind}: throughput {rate2 / rate1:.2f}x, "
            f"p99 {p99_2 / p99_1:.2f}x"
        )


if __name__ == "__main__":
    main()
