"""Garbage-collection pauses while the console home renders: the process as it was (start-up's
objects in the collector's oldest generation) against the same process after `gc.freeze()`
(core/gc_freeze.py), both in this run, in alternating blocks, in-process (Django's test Client,
a logged-in staff user, counts and charts recomputed on every load), on a throwaway database
(SQLite by default; DATABASE_URL=postgres://… for PostgreSQL) with stuck actions of its own.

    .venv/bin/python bench/gc_pauses.py [--actions 200] [--pages 300] [--rounds 6]

Every collection is timed start → stop through `gc.callbacks`. Between blocks the heap is
unfrozen (`gc.unfreeze()`: everything frozen goes back to the oldest generation) or collected
and frozen again. Prints p50/p99/max pause and the number of generation-2 collections of each,
and the ratios, last.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_agent, drop_database, percentile, setup_django  # noqa: E402


class Pauses:
    """Each collection's generation and duration (ms) while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.samples: list[tuple[int, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if not self.on:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.samples.append((info["generation"], (time.perf_counter() - self._started) * 1000))


def make_data(count: int) -> None:
    """`count` stuck actions (signed 20 minutes ago, still broadcast): the home's list."""
    from django.utils import timezone

    from actions.execution.models import ACTION_LIFECYCLE, ActionStatus
    from actions.tests.factories import make_action
    from core.lifecycle import Actor, transition

    user, application, _ = bench_agent()
    signed = timezone.now() - timedelta(minutes=20)
    for _ in range(count):
        action = make_action(user=user, application=application)
        for to in (ActionStatus.SIGNED, ActionStatus.SUBMITTED, ActionStatus.BROADCAST):
            transition(
                lifecycle=ACTION_LIFECYCLE,
                pk=action.pk,
                to=to,
                actor=Actor.worker(),
                updates={"signed_at": signed} if to == ActionStatus.SIGNED else None,
            )


def summary(samples: list[tuple[int, float]]) -> tuple[float, float, float, int, float]:
    """(p50, p99, max) pause in ms, the number of generation-2 collections and their median."""
    times = [ms for _, ms in samples] or [0.0]
    full = [ms for generation, ms in samples if generation == 2]
    p50, p99 = percentile(times, 50), percentile(times, 99)
    return p50, p99, max(times), len(full), percentile(full or [0.0], 50)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}" if b else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--actions", type=int, default=200, help="stuck actions listed")
    parser.add_argument("--pages", type=int, default=300, help="renders per block")
    parser.add_argument("--rounds", type=int, default=6, help="blocks of each, alternating")
    parser.add_argument("--database", default="bench_gc", help="the throwaway database")
    args = parser.parse_args()

    setup_django(args.database, sqlite=True)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client, override_settings

    from core.gc_freeze import warm_up

    logging.getLogger("picnic.access").setLevel(logging.WARNING)  # a line per render: not here
    try:
        make_data(args.actions)
        staff = get_user_model().objects.create(username="bench-staff", is_staff=True)
        staff.is_superuser = True
        staff.save()
        client = Client()
        client.force_login(staff)
        pauses = Pauses()
        gc.callbacks.append(pauses)
        blocks: dict[str, list[tuple[int, float]]] = {"without freeze": [], "gc.freeze()": []}
        with override_settings(CONSOLE_SUMMARY_CACHE_SECONDS=0):
            warm_up()
            for _ in range(3):  # templates compiled, caches filled: the page as it serves
                response = client.get("/staff/")
                assert response.status_code == 200, response.status_code
            for round_no in range(args.rounds):
                # Alternate which goes first, so neither always follows the other.
                order = list(blocks) if round_no % 2 == 0 else list(reversed(blocks))
                for name in order:
                    gc.unfreeze()
                    gc.collect()
                    if name == "gc.freeze()":
                        gc.freeze()
                    pauses.samples = []
                    pauses.on = True
                    for _ in range(args.pages):
                        response = client.get("/staff/")
                        assert response.status_code == 200, response.status_code
                    pauses.on = False
                    blocks[name].extend(pauses.samples)
                print(f"  round {round_no + 1}/{args.rounds}", flush=True)
        gc.callbacks.remove(pauses)
        gc.unfreeze()

        print()
        print(
            f"database: {connection.vendor}, {args.actions} stuck actions, "
            f"{args.rounds} × {args.pages} renders of /staff/ each"
        )
        print("| | collections | p50 ms | p99 ms | max ms | gen-2 collections | gen-2 p50 ms |")
        print("|---|---|---|---|---|---|---|")
        stats = {}
        for name, samples in blocks.items():
            stats[name] = p50, p99, top, full, full_p50 = summary(samples)
            print(
                f"| {name} | {len(samples)} | {p50:.2f} | {p99:.2f} | {top:.2f} | {full} "
                f"| {full_p50:.2f} |"
            )
        _, base_p99, base_max, _, base_full = stats["without freeze"]
        _, ours_p99, ours_max, _, ours_full = stats["gc.freeze()"]
        print(
            f"ratio p99 pause without/with freeze: {ratio(base_p99, ours_p99)}; "
            f"max: {ratio(base_max, ours_max)}; gen-2 p50: {ratio(base_full, ours_full)}"
        )
    finally:
        drop_database()


if __name__ == "__main__":
    main()
