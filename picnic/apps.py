import sys

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps

# Python's own default, which py_ecc overrides.
RECURSION_LIMIT = 1000


class PicnicConfig(AppConfig):
    name = "picnic"
    verbose_name = "Picnic (shared lifecycle machinery)"

    def ready(self) -> None:
        # py_ecc (web3 → eth_keyfile) raises the recursion limit to 100 000 at import, so a
        # runaway recursion overflows the C stack (a segfault) before RecursionError. Nothing
        # here uses its deep recursion (BLS pairings); import it now so it cannot raise the
        # limit again later, then put the default back. picnic.json_input is the real guard
        # for JSON bodies; this is the net under everything else.
        import py_ecc  # noqa: F401

        sys.setrecursionlimit(RECURSION_LIMIT)
        from picnic.events import on_entity_changed, on_status_changed
        from picnic.lifecycle import entity_changed, status_changed

        # Every committed transition, and every visible change without one, goes on the event
        # channel (the MCP adapter listens).
        status_changed.connect(on_status_changed, dispatch_uid="picnic-events")
        entity_changed.connect(on_entity_changed, dispatch_uid="picnic-events-changed")
        from django.core.signals import request_finished

        from picnic import task_tracing
        from picnic.middleware import end_trace

        request_finished.connect(end_trace, dispatch_uid="picnic-end-trace")

        # Tasks carry the trace of the request (or task) that enqueued them.
        task_tracing.connect()


class PicnicAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with picnic.admin.PicnicAdminSite as `admin.site` (the index lists
    the three apps first); picnic.admin is imported only once the apps are loaded."""

    default = False  # `picnic` itself is PicnicConfig
    default_site = "picnic.admin.PicnicAdminSite"
