import sys

from django.apps import AppConfig

# Python's own default, which py_ecc overrides.
RECURSION_LIMIT = 1000


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core (shared lifecycle machinery)"

    def ready(self) -> None:
        # py_ecc (web3 → eth_keyfile) raises the recursion limit to 100 000 at import, so a
        # runaway recursion overflows the C stack (a segfault) before RecursionError. Nothing
        # here uses its deep recursion (BLS pairings); import it now so it cannot raise the
        # limit again later, then put the default back. core.json_input is the real guard
        # for JSON bodies; this is the net under everything else.
        import py_ecc  # noqa: F401

        sys.setrecursionlimit(RECURSION_LIMIT)
        from core.events import on_entity_changed, on_status_changed
        from core.lifecycle import entity_changed, status_changed

        # Every committed transition, and every visible change without one, goes on the event
        # channel (the MCP adapter listens).
        status_changed.connect(on_status_changed, dispatch_uid="picnic-events")
        entity_changed.connect(on_entity_changed, dispatch_uid="picnic-events-changed")
        from django.core.signals import request_finished

        from core import task_tracing
        from core.middleware import end_trace

        request_finished.connect(end_trace, dispatch_uid="picnic-end-trace")

        # Tasks carry the trace of the request (or task) that enqueued them.
        task_tracing.connect()
