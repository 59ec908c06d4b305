"""The scrape-time gauges of /metrics at scale: our queries (one GROUP BY over the non-terminal
statuses per lifecycle, the stuck counts, the credits held) against the baseline of the same
gauges read naively (a GROUP BY over every row, terminal ones included, and a sum over every
wallet), both on the same tables of `--rows` finished items per lifecycle plus a few hundred
open ones, on a throwaway test database. Needs PostgreSQL (DATABASE_URL=postgres://…).

    .venv/bin/python bench/metrics_scrape.py [--rows 1000000] [--open 300] [--rounds 15]

Prints the EXPLAIN of each query, the median time of one whole scrape of the database gauges
for each (rounds interleaved), and the ratio last.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import drop_database, setup_django  # noqa: E402


def _clone(model, template_pk, n: int, overrides: dict[str, str]) -> None:
    """n copies of one row in one INSERT … SELECT, with `overrides` as SQL expressions of `g`
    (the series) for some columns (a new id, a terminal status, an older created_at)."""
    from django.db import connection

    table = model._meta.db_table
    columns = [f.column for f in model._meta.concrete_fields]
    select = [overrides.get(c, f't."{c}"') for c in columns]
    names = ", ".join(f'"{c}"' for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{table}" ({names}) SELECT {", ".join(select)} '  # noqa: S608
            f'FROM "{table}" t, generate_series(1, %s) g WHERE t."id" = %s',
            [n, template_pk],
        )


def _naive_families():
    """The baseline: the same gauges without the non-terminal filter or the partial index."""
    from django.db.models import Count, Min, Sum
    from django.utils.module_loading import import_string

    from core.lifecycle import lifecycles
    from operations.models import Wallet

    for lifecycle in lifecycles():
        field = lifecycle.status_field
        list(
            lifecycle.model._default_manager.order_by()
            .values(field)
            .annotate(n=Count("pk"), oldest=Min("created_at"))
        )
        if lifecycle.stuck_selector:  # as core.gauges: a lifecycle may define no stuck work
            import_string(lifecycle.stuck_selector)().count()
    Wallet.objects.aggregate(t=Sum("held_credits"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--open", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--database", default="bench_metrics", help="the throwaway database")
    args = parser.parse_args()

    setup_django(args.database)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    try:
        from decimal import Decimal

        from oauth2_provider.models import get_application_model

        from actions.execution.services import action_create
        from core.metrics import _database_families
        from messaging.models import Membership, Provider, Role, SocialAccount, Workspace
        from messaging.services import delivery_send
        from operations.models import Operation, Wallet

        user = get_user_model().objects.create_user("bench")
        app = get_application_model().objects.create(
            name="bench", user=user, client_type="confidential", authorization_grant_type="password"
        )
        action = action_create(
            user=user,
            application=app,
            type="cardFreeze",
            summary="bench",
            chain_id=31337,
            smart_account="0x" + "ab" * 20,
            params={"card_id": "c1"},
        )
        workspace = Workspace.objects.create(name="bench")
        Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
        account = SocialAccount.objects.create(
            workspace=workspace, provider=Provider.X, handle="bench", credential_ref="env:NONE"
        )
        import uuid

        delivery = delivery_send(
            user=user,
            application=app,
            workspace_id=workspace.pk,
            social_account_id=account.pk,
            recipient_id="1234567890",
            text="bench",
            idempotency_key=uuid.uuid4(),
        ).delivery
        operation = Operation.objects.create(owner=user, tool="bench", category="bench")
        older = "now() - g * interval '1 second'"
        started = time.perf_counter()
        for model, pk, field, done, extra in (
            (type(action), action.pk, "status", "rejected", {}),
            (
                type(delivery),
                delivery.pk,
                "status",
                "cancelled",
                {"idempotency_key": "gen_random_uuid()"},
            ),
            (
                Operation,
                operation.pk,
                "state",
                "cancelled",
                {},
            ),
        ):
            # A finished operation's status and stage follow its state (operation_state_status_stage).
            finished = (
                {"status": "'cancelled'", "stage": "'complete'"} if model is Operation else {}
            )
            _clone(
                model,
                pk,
                args.rows,
                {
                    "id": "gen_random_uuid()",
                    field: f"'{done}'",
                    "created_at": older,
                    **extra,
                    **finished,
                },
            )
            _clone(model, pk, args.open, {"id": "gen_random_uuid()", "created_at": older, **extra})
        users = get_user_model().objects.bulk_create(
            get_user_model()(username=f"w{i}") for i in range(args.rows // 10)
        )
        Wallet.objects.bulk_create(
            Wallet(owner=u, held_credits=Decimal(1) if i % 1000 == 0 else 0)
            for i, u in enumerate(users)
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        print(
            f"data: {args.rows:,} finished + {args.open} open per lifecycle, "
            f"{len(users):,} wallets ({time.perf_counter() - started:.0f}s)"
        )

        with CaptureQueriesContext(connection) as ours:
            _database_families()
        with CaptureQueriesContext(connection) as naive:
            _naive_families()
        for label, captured in (("ours", ours), ("baseline", naive)):
            print(f"\n== {label}: {len(captured)} queries")
            for query in captured.captured_queries:
                with connection.cursor() as cursor:
                    cursor.execute("EXPLAIN (ANALYZE, COSTS OFF) " + query["sql"])
                    plan = [row[0] for row in cursor.fetchall()]
                print(query["sql"][:160])
                print("   " + "\n   ".join(plan))

        timings = {"ours": [], "baseline": []}
        for _ in range(args.rounds):
            for label, read in (("ours", _database_families), ("baseline", _naive_families)):
                start = time.perf_counter()
                read()
                timings[label].append(time.perf_counter() - start)
        ours_ms = statistics.median(timings["ours"]) * 1000
        base_ms = statistics.median(timings["baseline"]) * 1000
        print(f"\nscrape of the database gauges, median of {args.rounds} interleaved rounds:")
        print(f"  ours     {ours_ms:8.2f} ms")
        print(f"  baseline {base_ms:8.2f} ms")
        print(f"ratio baseline/ours: {base_ms / ours_ms:.1f}x")
    finally:
        drop_database()


if __name__ == "__main__":
    main()
