"""Per-item cost of the two background batches: operations processing (`operations_process_due`:
dispatch to the Responses backend, then the check that completes and settles) and action
reconciliation (`actions_reconcile_pending`: a user operation still pending at the bundler,
then one whose receipt arrived). SQL statements per item and CPU per item of the calling
thread (the local backend and bundler answer from other threads and are not counted).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/batches.py [--items 200] [--rounds 5] [--database bench_hot_batches]

No baseline of its own: run it on two commits to compare (docs/benchmarks.md has both). The
median of `--rounds` batches of `--items` is printed per step.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    bench_agent,
    drop_database,
    machine,
    percentile,
    setup_django,
)


def measure(fn, items: int) -> tuple[float, float, object]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    connection.queries_log.clear()  # the log keeps 9,000 entries; a batch must fit
    with CaptureQueriesContext(connection) as queries:
        started = time.thread_time()
        result = fn()
        cpu = time.thread_time() - started
    return len(queries.captured_queries) / items, cpu * 1000 / items, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--database", default="bench_hot_batches", help="the throwaway database's name"
    )
    args = parser.parse_args()
    os.environ.setdefault("EVENTS_URL", "redis://127.0.0.1:6379/6")
    print(machine())
    setup_django(args.database)
    from django.conf import settings

    from actions.execution.models import ACTION_LIFECYCLE, ActionStatus
    from actions.execution.services import actions_reconcile_pending
    from actions.tests.factories import make_action
    from core.lifecycle import Actor, transition
    from dev.providers.local_openai import LocalResponsesServer
    from dev.testing import ScriptedServer
    from operations import billing
    from operations.services import operation_submit, operations_process_due

    user, application, _token = bench_agent()
    billing.wallet_grant(owner=user, amount=Decimal("1000000"), note="bench")
    steps: dict[str, list[tuple[float, float]]] = {}

    def record(name: str, fn, expected: str) -> None:
        statements, cpu, result = measure(fn, args.items)
        assert dict(result) == {expected: args.items}, (name, result)
        steps.setdefault(name, []).append((statements, cpu))

    try:
        with (
            LocalResponsesServer(api_key="bench", work_seconds=0.5) as backend,
            ScriptedServer() as bundler,
        ):
            settings.OPERATIONS_BACKEND_URL = backend.url
            settings.OPERATIONS_BACKEND_API_KEY = "bench"
            settings.OPERATIONS_POLL_SECONDS = 0.0
            from core.chains import with_endpoints

            for chain in settings.CHAINS:  # every chain's node and bundler: the scripted one
                settings.CHAINS = with_endpoints(
                    chain.id, rpc_url=bundler.url, bundler_url=bundler.url
                )
            for _ in range(args.rounds):
                for _ in range(args.items):
                    operation_submit(
                        owner=user,
                        application=application,
                        tool="text-gen",
                        category="writing",
                        input_text="Write a haiku about picnics",
                    )
                n = args.items
                record("operation dispatch", lambda n=n: operations_process_due(limit=n), "waiting")
                time.sleep(0.6)  # the backend's work is done
                record("operation check", lambda n=n: operations_process_due(limit=n), "succeeded")

                actions = [make_action(user=user, application=application) for _ in range(n)]
                for action in actions:
                    for step in (ActionStatus.SIGNED, ActionStatus.SUBMITTED):
                        transition(
                            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system()
                        )
                    transition(
                        lifecycle=ACTION_LIFECYCLE,
                        pk=action.pk,
                        to=ActionStatus.BROADCAST,
                        actor=Actor.system(),
                    )
                bundler.results = {
                    "eth_getUserOperationReceipt": None,
                    "eth_getUserOperationByHash": {"userOpHash": "0x"},
                }
                record(
                    "action reconcile, still pending",
                    lambda n=n: actions_reconcile_pending(batch_size=n),
                    "pending",
                )
                bundler.results = {
                    "eth_getUserOperationReceipt": {
                        "userOpHash": "0x" + "11" * 32,
                        "success": True,
                        "reason": "0x",
                        "actualGasUsed": "0x1",
                        "receipt": {"transactionHash": "0x" + "ab" * 32, "blockNumber": "0x2a"},
                    }
                }
                record(
                    "action reconcile, executed",
                    lambda n=n: actions_reconcile_pending(batch_size=n),
                    "executed",
                )
    finally:
        drop_database()
    for name, samples in steps.items():
        statements = percentile([s for s, _ in samples], 50)
        cpu = percentile([c for _, c in samples], 50)
        print(f"{name}: {statements:.1f} SQL statements and {cpu:.2f} ms CPU per item")


if __name__ == "__main__":
    main()
