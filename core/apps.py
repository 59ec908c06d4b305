import sys

# py_ecc (web3 → eth_keyfile) raises the recursion limit to 100 000 at import, so a runaway
# recursion overflows the C stack (a segfault) before RecursionError. Nothing here uses its
# deep recursion (BLS pairings); it is imported now so it cannot raise the limit again later,
# and ready() puts the default back. core.json_input is the real guard for JSON bodies; this
# is the net under everything else.
import py_ecc  # noqa: F401
from django.apps import AppConfig
from django.core.signals import request_finished

from core import logs, metrics
from core.middleware import end_trace

# Python's own default, which py_ecc overrides.
RECURSION_LIMIT = 1000


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core (shared lifecycle machinery)"

    def ready(self) -> None:
        sys.setrecursionlimit(RECURSION_LIMIT)
        # In ready(): core.lifecycle imports core.models, whose (abstract) models can only be
        # defined once the app registry is ready.
        from core import gauges, lifecycle, users

        # Every committed transition, and every visible change without one, goes on the event
        # channel (the MCP adapter listens).
        lifecycle.status_changed.connect(lifecycle.on_status_changed, dispatch_uid="picnic-events")
        lifecycle.entity_changed.connect(
            lifecycle.on_entity_changed, dispatch_uid="picnic-events-changed"
        )
        # A user set inactive, whichever way: every app ends what it holds of theirs.
        users.connect()
        request_finished.connect(end_trace, dispatch_uid="picnic-end-trace")
        # A task's log lines name it and what it was handed (its trace: picnic.otel).
        logs.connect_tasks()
        # The scrape-time gauges of every kind of work (apps add their own from their ready()).
        metrics.register_database_gauges(gauges.lifecycle_families)
