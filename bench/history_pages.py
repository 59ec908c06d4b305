"""get_transactions pages: our keyset page (`transactions_page` with a cursor) against the
baseline of the same page read with OFFSET, both measured in this run, on a throwaway test
database (SQLite by default; DATABASE_URL=postgres://… for PostgreSQL).

    .venv/bin/python bench/history_pages.py [--entries 20000] [--page 50] [--repeat 20]

Prints the median time of a page near the end of the history for each, and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import drop_database, setup_django  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--page", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--database", default="bench_history", help="the throwaway database")
    args = parser.parse_args()

    setup_django(args.database, sqlite=True)
    from django.contrib.auth import get_user_model
    from django.db import connection

    try:
        from actions.history.models import HistoryEntry
        from actions.history.selectors import encode_cursor
        from actions.presenters import entry_payload, transactions_page

        user = get_user_model().objects.create(username="bench")
        start = datetime(2026, 1, 1, tzinfo=UTC)
        HistoryEntry.objects.bulk_create(
            HistoryEntry(
                user=user,
                occurred_at=start + timedelta(seconds=i // 3),  # ties, as in one block
                kind="cardFreeze",
            )
            for i in range(args.entries)
        )
        ordered = HistoryEntry.objects.filter(user=user).order_by("-occurred_at", "-pk")
        depth = args.entries - 2 * args.page  # a page near the end: OFFSET's worst case
        anchor = ordered[depth - 1]
        cursor = encode_cursor(anchor)

        def keyset() -> list:
            return transactions_page(user=user, cursor=cursor, limit=args.page)["transactions"]

        def offset() -> list:
            # The same page and the same payloads, reached with OFFSET instead of a cursor.
            page = ordered.select_related("action", "card_purchase")[depth : depth + args.page]
            return [entry_payload(e, [], set()) for e in page]

        assert keyset() == offset()

        def median(fn) -> float:
            samples = []
            for _ in range(args.repeat):
                began = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - began)
            return statistics.median(samples)

        base, ours = median(offset), median(keyset)
        print(f"database: {connection.vendor}, {args.entries} entries, page {args.page}")
        print(f"OFFSET page at depth {depth} (baseline): {base * 1000:.2f} ms")
        print(f"keyset page via cursor (ours):          {ours * 1000:.2f} ms")
        print(f"ratio ours/baseline: {ours / base:.2f}")
    finally:
        drop_database()


if __name__ == "__main__":
    main()
