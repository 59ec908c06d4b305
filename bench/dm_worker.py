"""DM deliveries per second through a real Celery worker (prefork, 2 processes, Redis) next to
the protocol baselines (`bench/dm_tasks.py`: one conditional UPDATE to claim, commit `sending`,
the POST, commit `sent`, one history row per transition, raw SQL) on the same worker, the same
local X provider (its own process) and the same database, in this run. Two baselines: `floor`
makes each transition one statement (a CTE: UPDATE and history INSERT, 2 statements per
delivery), the goal's baseline; `protocol` wraps each in BEGIN/COMMIT (8 statements).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/6 \\
        .venv/bin/python bench/dm_worker.py [--per-round 1000] [--rounds 10] [--warm 100]

Makes its own database (bench_hot_dm, or `--database`). Each round queues `--per-round` deliveries (copies made
in SQL) for each side, the order rotating between rounds, and publishes one task per delivery; the
rate is deliveries over the span from the first claim to the last `sent` (history timestamps),
so publishing does not count. Also printed: SQL statements and CPU of one delivery of each (in
process, without Celery), worker CPU per delivery (the two pool processes' utime+stime), the pool processes'
RSS after the first and the last round of the project's deliveries, and the transition-commit →
event-at-a-Redis-subscriber latency. The ratios are last (project/floor is the goal's).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
import uuid
from pathlib import Path

from cryptography.fernet import Fernet

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    PYTHON,
    ROOT,
    bench_agent,
    drop_database,
    free_port,
    machine,
    percentile,
    setup_django,
    start,
    stop,
    wait_for_port,
)

TOKEN = "bench-x-token"
PROJECT, PROTOCOL, FLOOR = "project", "protocol", "floor"
KINDS = (FLOOR, PROTOCOL, PROJECT)
TASKS = {
    PROJECT: "messaging.tasks.delivery_deliver",
    PROTOCOL: "bench.protocol_deliver",
    FLOOR: "bench.floor_deliver",
}
FIRST = {PROJECT: "claimed", PROTOCOL: "sending", FLOOR: "sending"}


def rotated(round_no: int) -> tuple[str, ...]:
    """Each side goes first, second and last equally often over the rounds."""
    shift = round_no % len(KINDS)
    return KINDS[shift:] + KINDS[:shift]


def make_template():

    from core.lifecycle import Actor, create
    from messaging.models import (
        DELIVERY_LIFECYCLE,
        Conversation,
        Provider,
        SocialAccount,
        Workspace,
    )
    from messaging.services import payload_hash

    user, application, _token = bench_agent()
    workspace = Workspace.objects.create(name="bench")
    account = SocialAccount.objects.create(
        workspace=workspace, provider=Provider.X, handle="bench", credential_ref="env:BENCH_X_TOKEN"
    )
    conversation = Conversation.objects.create(social_account=account, recipient_id="1234567890")

    def one(text: str):
        return create(
            lifecycle=DELIVERY_LIFECYCLE,
            actor=Actor.agent(),
            detail="accepted for delivery",
            values={
                "workspace_id": workspace.pk,
                "social_account": account,
                "conversation": conversation,
                "text": text,
                "idempotency_key": uuid.uuid4(),
                "payload_hash": payload_hash(recipient_id="1234567890", text=text),
                "created_by": user,
                "application": application,
            },
        )

    return one


def queue_copies(template, count: int, tag: str) -> list[tuple[str, str]]:
    """`count` queued deliveries like `template`, each with its first history row, in SQL, and
    each in a trace of its own, as the request that queues one has: (id, trace id) pairs."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = "
            "'messaging_delivery'"
        )
        columns = [row[0] for row in cursor.fetchall()]
        fresh = {
            "id": "gen_random_uuid()",
            "idempotency_key": "gen_random_uuid()",
            "text": f"'{tag} ' || n",
            "created_at": "now()",
            "updated_at": "now()",
            "next_attempt_at": "now()",
            "trace_id": "md5(gen_random_uuid()::text)",
        }
        chosen = ", ".join(fresh.get(c, f't."{c}"') for c in columns)
        names = ", ".join(f'"{c}"' for c in columns)
        cursor.execute(
            f"INSERT INTO messaging_delivery ({names}) SELECT {chosen} FROM messaging_delivery t, "
            "generate_series(1, %s) AS n WHERE t.id = %s RETURNING id, trace_id",
            [count, template.pk],
        )
        copies = [(str(pk), trace_id) for pk, trace_id in cursor.fetchall()]
        cursor.execute(
            "INSERT INTO messaging_deliverystatushistory (delivery_id, from_status, status, "
            "timestamp, detail, actor_kind, trace_id) SELECT id, NULL, 'queued', now(), "
            "'accepted for delivery', 'agent', trace_id FROM messaging_delivery WHERE text LIKE %s",
            [f"{tag} %"],
        )
    return copies


def statements(fn) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert fn() == "sent"
    return len(queries.captured_queries)


def cpu_in_process(template, per_round: int = 300, rounds: int = 4) -> dict[str, float]:
    """CPU per delivery of each side in this process (no Celery), rounds interleaved, median:
    the steadier figure on a shared machine (waiting for PostgreSQL, Redis or the provider
    costs no CPU). Log lines go to /dev/null, as a worker's would go to its log."""
    import logging

    from bench.dm_tasks import floor_deliver_now, protocol_deliver_now
    from core import tracing
    from messaging.worker import delivery_process

    handlers = [h for h in logging.getLogger().handlers if hasattr(h, "setStream")]
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    streams = [h.setStream(devnull) for h in handlers]
    deliver = {
        PROJECT: lambda pk: delivery_process(delivery_id=pk, worker_id="bench"),
        PROTOCOL: protocol_deliver_now,
        FLOOR: floor_deliver_now,
    }
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    try:
        for round_no in range(rounds):
            for kind in rotated(round_no):
                copies = queue_copies(template, per_round, f"cpu-{kind}-{round_no}")
                started = time.process_time()
                for pk, trace_id in copies:
                    # Each in the trace that queued it, as a worker's task span is.
                    with tracing.adopt(trace_id):
                        assert deliver[kind](pk) == "sent"
                samples[kind].append((time.process_time() - started) * 1000 / per_round)
    finally:
        for handler, stream in zip(handlers, streams, strict=True):
            handler.setStream(stream)
        devnull.close()
    return {kind: percentile(values, 50) for kind, values in samples.items()}


def pool_pids(main_pid: int) -> list[int]:
    try:
        return [
            int(p) for p in Path(f"/proc/{main_pid}/task/{main_pid}/children").read_text().split()
        ]
    except FileNotFoundError:
        return []


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def run_round(app, queue: str, kind: str, copies, tag: str, pids) -> tuple[float, float]:
    from django.db import connection

    from core import tracing

    ids = [pk for pk, _trace_id in copies]
    cpu_before = cpu_seconds(pids)
    for pk, trace_id in copies:
        # Published in the delivery's trace, as `enqueue_on_commit` does in the request that
        # queued it: the Celery instrumentation carries it to the worker's task span.
        with tracing.adopt(trace_id):
            app.send_task(TASKS[kind], args=[pk], queue=queue)
    deadline = time.monotonic() + 600
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT count(*) FROM messaging_delivery WHERE text LIKE %s AND status = 'sent'",
                [f"{tag} %"],
            )
            if cursor.fetchone()[0] == len(ids):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tag}: not all sent within 600 s")
            time.sleep(0.2)
        cpu = cpu_seconds(pids) - cpu_before
        cursor.execute(
            "SELECT min(h.timestamp) FILTER (WHERE h.status = %s), "
            "max(h.timestamp) FILTER (WHERE h.status = 'sent') "
            "FROM messaging_deliverystatushistory h JOIN messaging_delivery d "
            "ON d.id = h.delivery_id WHERE d.text LIKE %s",
            [FIRST[kind], f"{tag} %"],
        )
        first, last = cursor.fetchone()
    return len(ids) / (last - first).total_seconds(), cpu * 1000 / len(ids)


def event_latency(make_one, count: int) -> list[float]:
    """Transition commit → the event read by a Redis subscriber, in ms."""
    import redis
    from django.conf import settings
    from django.db import transaction

    from core.events import CHANNEL
    from core.lifecycle import Actor
    from messaging.models import D
    from messaging.services import delivery_transition

    client = redis.Redis.from_url(settings.EVENTS_URL)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(CHANNEL)
    while pubsub.get_message(timeout=0.5):
        pass
    samples = []
    for i in range(count):
        delivery = make_one(f"event {i}")
        committed: list[float] = []
        with transaction.atomic():
            # Registered first, so it runs first after COMMIT, before the event is published.
            transaction.on_commit(lambda done=committed: done.append(time.perf_counter()))
            delivery_transition(
                delivery_id=delivery.pk, to=D.CANCELLED, actor=Actor.system(), only_from={D.QUEUED}
            )
        # Redis pub/sub ignores the database number: skip other systems' events.
        deadline = time.monotonic() + 5
        while True:
            message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            received = time.perf_counter()
            assert message, f"no event for {delivery.pk}"
            if str(delivery.pk).encode() in message["data"]:
                break
        samples.append((received - committed[0]) * 1000)
    pubsub.close()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--per-round", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument(
        "--warm", type=int, default=100, help="unmeasured deliveries per side through the worker"
    )
    parser.add_argument("--database", default="bench_hot_dm", help="the throwaway database's name")
    args = parser.parse_args()

    broker = os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/6")
    os.environ.setdefault("EVENTS_URL", broker)
    os.environ["BENCH_X_TOKEN"] = TOKEN
    print(machine())
    db_url = setup_django(args.database)
    from django.conf import settings

    from bench.dm_tasks import floor_deliver_now, protocol_deliver_now
    from core import tracing
    from messaging.worker import delivery_process
    from picnic.celery import app

    procs = []
    try:
        provider_port = free_port()
        procs.append(
            start(
                [
                    PYTHON,
                    "-m",
                    "dev.providers.local_x",
                    "--port",
                    str(provider_port),
                    "--token",
                    TOKEN,
                ],
                env={"PYTHONPATH": str(ROOT)},
                log=Path(f"/tmp/bench-dm-provider-{provider_port}.log"),
            )
        )
        wait_for_port(provider_port)
        settings.X_API_BASE_URL = f"http://127.0.0.1:{provider_port}"
        make_one = make_template()
        template = make_one("template")
        # Statements of one delivery each, in this process: the conversation already has its
        # provider id and the process has resolved the credential once (the steady state), the
        # deliveries exist before counting starts, and ours is worked in the trace that queued
        # it, as a worker's task is.
        delivery_process(delivery_id=make_one("first").pk, worker_id="bench")
        with tracing.span(name="bench.send"):
            ours = make_one("x")
        theirs, floor = make_one("y"), make_one("z")

        def ours_in_its_trace():
            with tracing.adopt(ours.trace_id):
                return delivery_process(delivery_id=ours.pk, worker_id="bench")

        counts = {
            PROJECT: statements(ours_in_its_trace),
            PROTOCOL: statements(lambda: protocol_deliver_now(str(theirs.pk))),
            FLOOR: statements(lambda: floor_deliver_now(str(floor.pk))),
        }
        in_process = cpu_in_process(template, per_round=3 * args.warm)
        print(
            f"CPU per delivery in process (no Celery): project {in_process[PROJECT]:.2f} ms, "
            f"protocol {in_process[PROTOCOL]:.2f} ms, floor {in_process[FLOOR]:.2f} ms",
            flush=True,
        )
        queue = f"bench-dm-{uuid.uuid4().hex[:8]}"
        worker = start(
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "picnic",
                "worker",
                "--pool=prefork",
                "--concurrency=2",
                "-Q",
                queue,
                "--include",
                "bench.dm_tasks",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "info",
                "-n",
                f"{queue}@%h",
            ],
            env={
                "PYTHONPATH": str(ROOT),
                "DATABASE_URL": db_url,
                "CELERY_BROKER_URL": broker,
                "EVENTS_URL": os.environ["EVENTS_URL"],
                "X_API_BASE_URL": settings.X_API_BASE_URL,
                "DJANGO_DEBUG": "false",
                "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
                "SPEND_PERMISSION_KEYS": Fernet.generate_key().decode(),
            },
            log=Path(f"/tmp/{queue}.log"),
        )
        procs.append(worker)
        # Warm both sides (imports, connections) before anything is measured.
        deadline = time.monotonic() + 60
        while len(pool_pids(worker.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = pool_pids(worker.pid)
        for kind in KINDS:
            tag = f"warm-{kind}"
            run_round(app, queue, kind, queue_copies(template, args.warm, tag), tag, pids)
        results = {kind: [] for kind in KINDS}
        cpu = {kind: [] for kind in KINDS}
        rss = []
        for round_no in range(args.rounds):
            for kind in rotated(round_no):
                tag = f"{kind}-{round_no}"
                copies = queue_copies(template, args.per_round, tag)
                rate, cpu_ms = run_round(app, queue, kind, copies, tag, pids)
                results[kind].append(rate)
                cpu[kind].append(cpu_ms)
                if kind == PROJECT:
                    rss.append(rss_mb(pids))
            print(
                f"round {round_no}: floor {results[FLOOR][-1]:.0f}/s, protocol "
                f"{results[PROTOCOL][-1]:.0f}/s, project {results[PROJECT][-1]:.0f}/s",
                flush=True,
            )
        latencies = event_latency(make_one, args.events)
    finally:
        for proc in reversed(procs):
            stop(proc)
        drop_database()

    def median(values):
        return percentile(values, 50)

    for kind in KINDS:
        print(
            f"{kind}: median {median(results[kind]):.0f} deliveries/s over {args.rounds} rounds "
            f"of {args.per_round} (min {min(results[kind]):.0f}, max {max(results[kind]):.0f}); "
            f"{counts[kind]} SQL statements per delivery (BEGIN/COMMIT included); worker CPU "
            f"{median(cpu[kind]):.2f} ms per delivery"
        )
    growth = (rss[-1] - rss[0]) / rss[0] * 100
    print(
        f"worker pool RSS: {rss[0]:.1f} MB after the first project round, {rss[-1]:.1f} MB after "
        f"{args.rounds * args.per_round} project deliveries ({growth:+.1f} %)"
    )
    print(
        f"transition commit -> event at a Redis subscriber: p50 {percentile(latencies, 50):.2f} "
        f"ms, p95 {percentile(latencies, 95):.2f} ms over {len(latencies)} transitions"
    )
    for mine, theirs in ((PROJECT, FLOOR), (PROJECT, PROTOCOL), (FLOOR, PROTOCOL)):
        ratio = median(results[mine]) / median(results[theirs])
        print(f"ratio {mine}/{theirs} deliveries/s: {ratio:.2f}")


if __name__ == "__main__":
    main()
