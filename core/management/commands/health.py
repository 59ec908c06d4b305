"""`manage.py health`: the readiness checks of /readyz for process supervisors.

One line per check; exit 0 when every check passes, 1 otherwise. `--liveness` only starts
Django (settings load, apps ready) and exits 0, like /healthz.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.health import is_ready, run_checks


class Command(BaseCommand):
    help = "Run the readiness checks (database, broker, cache, events, chain RPC, bundler)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--liveness", action="store_true", help="only check that Django starts (no I/O)"
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=None,
            help="seconds per check (default: HEALTH_CHECK_TIMEOUT_SECONDS)",
        )

    def handle(self, *args, liveness: bool, timeout: float | None, **options):
        if liveness:
            self.stdout.write("live")
            return
        results = run_checks(timeout=timeout)
        for result in results:
            state = "ok" if result.ok else f"FAIL: {result.error}"
            if not result.ok and not result.required:
                state += " (reported, not required)"
            label = f"{result.name} ({result.chain})" if result.chain else result.name
            self.stdout.write(f"{label:<30} {result.latency_ms:>5} ms  {state}")
        failed = [result.name for result in results if not result.ok and result.required]
        if not is_ready(results):
            raise CommandError(f"not ready: {', '.join(failed)}", returncode=1)
        self.stdout.write("ready")
