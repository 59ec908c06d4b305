"""Failover times of the stores, each alone (dev/cluster.py's HA mode): a client writes in a
loop (one write acknowledged at a time), the primary is SIGKILLed, and this measures how long
until a write is acknowledged again, whether an acknowledged write was lost, and how long the
killed node takes to rejoin.

    .venv/bin/python bench/failover.py [postgres] [redis] [rabbitmq] [--defaults]
        [--workdir /tmp/ha-bench]

--defaults runs PostgreSQL with pg_auto_failover's default timeouts instead of the tuned ones.
Numbers from a run are in docs/deploy.md ("Failover").
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path

import django

# Run as `python bench/failover.py` (as every bench is) or with -m: the project on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")
django.setup()

import psycopg  # noqa: E402
from kombu import Connection, Exchange, Queue  # noqa: E402

from core import stores  # noqa: E402
from dev import cluster as clusters  # noqa: E402


class Writer:
    """Writes one at a time until stopped; keeps what was acknowledged and when."""

    def __init__(self, write):
        self.write = write
        self.acked: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                self.write(i)
            except Exception:  # noqa: BLE001 - a failed write is retried as the next one
                time.sleep(0.05)
                continue
            self.acked.append((time.monotonic(), i))
            time.sleep(0.02)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def first_after(self, moment: float, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [t for t, _ in self.acked if t > moment]
            if later:
                return later[0] - moment
            time.sleep(0.05)
        raise TimeoutError("no write acknowledged after the kill")


def postgres(workdir: Path, tuned: bool) -> dict:
    pg = clusters.FailoverPostgres(workdir / "pg", tuned=tuned)
    started = time.monotonic()
    pg.start()
    took = {"start": time.monotonic() - started}
    try:
        with psycopg.connect(pg.url(), autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS writes (i integer PRIMARY KEY)")
        holder: dict = {}

        def write(i: int) -> None:
            conn = holder.get("conn")
            if conn is None or conn.closed:
                conn = holder["conn"] = psycopg.connect(
                    pg.url(), autocommit=True, connect_timeout=2
                )
            try:
                conn.execute("INSERT INTO writes VALUES (%s)", (i,))
            except psycopg.Error:
                conn.close()
                raise

        with Writer(write) as writer:
            time.sleep(2)
            primary = pg.primary()
            killed = time.monotonic()
            pg.kill(primary)
            took["writes again"] = writer.first_after(killed)
            time.sleep(1)
        rejoin = time.monotonic()
        pg.rejoin(primary)
        clusters.wait_for(
            lambda: sorted(pg.states().values()) == ["primary", "secondary"],
            timeout=180,
            what="the old primary as standby",
        )
        took["rejoined"] = time.monotonic() - rejoin
        with psycopg.connect(pg.url()) as conn:
            kept = {i for (i,) in conn.execute("SELECT i FROM writes")}
        took["acknowledged lost"] = len({i for _, i in writer.acked} - kept)
        took["acknowledged"] = len(writer.acked)
    finally:
        pg.stop()
    return took


def redis(workdir: Path) -> dict:
    group = clusters.ReplicatedRedis(workdir / "redis")
    started = time.monotonic()
    group.start()
    took = {"start": time.monotonic() - started}
    try:
        client = stores.redis_client(
            group.url(), master=group.MASTER, socket_timeout=1, socket_connect_timeout=1
        )
        with Writer(lambda i: client.set(f"w:{i}", i)) as writer:
            time.sleep(2)
            node = group.primary()
            killed = time.monotonic()
            node.kill()
            took["writes again"] = writer.first_after(killed)
            time.sleep(1)
        rejoin = time.monotonic()
        group.rejoin(node)

        clusters.wait_for(
            lambda: group.in_sync(node), timeout=60, what="the old primary as replica"
        )
        took["rejoined"] = time.monotonic() - rejoin
        acked = {i for _, i in writer.acked}
        kept = {int(k.split(b":")[1]) for k in client.keys("w:*")}
        took["acknowledged lost"] = len(acked - kept)
        took["acknowledged"] = len(acked)
    finally:
        group.stop()
    return took


def rabbitmq(workdir: Path) -> dict:
    rabbits = clusters.RabbitCluster(workdir / "rabbit")
    started = time.monotonic()
    rabbits.start()
    took = {"start": time.monotonic() - started}
    name = f"failover-{uuid.uuid4().hex[:6]}"
    queue = Queue(name, Exchange(name), name, queue_arguments={"x-queue-type": "quorum"})
    try:
        conn = Connection(rabbits.url(), transport_options={"confirm_publish": True})
        producer = conn.Producer()
        publish = conn.ensure(producer, producer.publish, max_retries=None, interval_start=0,
                              interval_step=0.2, interval_max=1)  # fmt: skip
        publish({"i": 0}, exchange=queue.exchange, routing_key=name, declare=[queue])

        def write(i: int) -> None:
            publish({"i": i}, exchange=queue.exchange, routing_key=name)

        with Writer(write) as writer:
            time.sleep(2)
            leader = rabbits.node_named(rabbits.queue_leaders(name)[name])
            killed = time.monotonic()
            rabbits.kill(leader)
            took["writes again"] = writer.first_after(killed)
            time.sleep(1)
        rejoin = time.monotonic()
        rabbits.rejoin(leader)
        took["rejoined"] = time.monotonic() - rejoin
        got = set()
        with Connection(rabbits.url()) as reader:
            with reader.SimpleQueue(queue) as simple:
                while True:
                    try:
                        message = simple.get(timeout=2)
                    except simple.Empty:
                        break
                    got.add(message.payload["i"])
                    message.ack()
        acked = {i for _, i in writer.acked}
        took["acknowledged lost"] = len(acked - got)
        took["acknowledged"] = len(acked)
        conn.release()
    finally:
        rabbits.stop()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("stores", nargs="*", default=["postgres", "redis", "rabbitmq"])
    parser.add_argument("--defaults", action="store_true")
    parser.add_argument("--workdir", default="/tmp/ha-bench")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    for store in args.stores:
        folder = workdir / store
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        if store == "postgres":
            took = postgres(folder, tuned=not args.defaults)
        else:
            took = {"redis": redis, "rabbitmq": rabbitmq}[store](folder)
        shown = ", ".join(
            f"{k} {v:.1f} s" if isinstance(v, float) else f"{k} {v}" for k, v in took.items()
        )
        print(f"{store}: {shown}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
