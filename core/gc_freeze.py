"""The collector leaves start-up's objects alone: once a process has loaded what it keeps for
its whole life (Django's apps, the URL conf and every view module it imports, the task
modules), `gc.freeze()` moves them to a permanent generation that no collection walks.

Without it every full (generation-2) collection re-walks those few hundred thousand objects: a
76–91 ms pause in the middle of some request of the console home, where the same collection
after a freeze takes about 2 ms (bench/gc_pauses.py, docs/benchmarks.md). Nothing is freed
less: a frozen object is still freed when its reference count drops to zero; only a reference
cycle among frozen objects is kept, and start-up builds its modules and registries to keep.

Called once per process after its start-up (picnic/gunicorn_conf.py: `post_worker_init`;
picnic/celery.py: `worker_init` and `worker_process_init`); GC_FREEZE_AT_STARTUP=false turns
it off.
"""

from __future__ import annotations

import gc
import logging

from django.conf import settings
from django.urls import get_resolver

logger = logging.getLogger(__name__)


def warm_up() -> None:
    """What a process loads on its first request, loaded now: the URL conf (and, through it,
    every view module and its imports) with its reverse tables."""
    resolver = get_resolver()
    resolver.url_patterns  # noqa: B018 - imports the URL conf and every view module
    resolver.reverse_dict  # noqa: B018 - builds the reverse tables (the first reverse() does)


def freeze_after_start_up(process: str) -> int:
    """Warm up, collect start-up's garbage (so none of it is frozen for good), then freeze what
    is left; log and return how many objects are frozen (0 when GC_FREEZE_AT_STARTUP is off).
    Django must be set up. Calling it again freezes what was allocated since."""
    if not settings.GC_FREEZE_AT_STARTUP:
        logger.info("gc.freeze at start-up is off (GC_FREEZE_AT_STARTUP): %s", process)
        return 0
    warm_up()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("gc.freeze after start-up: %d objects frozen (%s)", frozen, process)
    return frozen
