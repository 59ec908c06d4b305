"""Transition → screen: how long after a transition commits does an open staff timeline show it?

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_live \
    EVENTS_URL=redis://127.0.0.1:6379/0 \
        .venv/bin/python bench/live_updates.py [--rounds 10] [--workers 2]

The production web process (gunicorn + uvicorn workers on picnic.asgi, DEBUG off, collected
static files, pooled PostgreSQL connections, events on Redis) and Debian's Chromium (Playwright,
headless) logged in as staff. Each round opens, in a shuffled order, one fresh action's timeline
live (server-sent events, the polling fallback held back) and one with `?live=0` (the 2 s polling
it had before: the baseline), then moves each action proposed → signed → submitted → broadcast →
executed from this process (another connection, as a worker would), a random 0–1 s after the
page showed the previous status, so the transitions fall at random points of the poll cycle. A
MutationObserver in the page stamps the moment the status element changes; the latency is that
stamp minus the moment just before the transition was called (its commit included). Prints
p50/p95/max per mode, then the ratio of the polling p95 to the live p95 last.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import create_database, free_port, percentile, server_env  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
STEPS = ("signed", "submitted", "broadcast", "executed")

# Stamps (epoch ms, the same clock as Python's time.time()) each status the page shows.
OBSERVE = """
window.__seen = {};
new MutationObserver(function () {
  var el = document.querySelector("#timeline [data-status]");
  if (el && !(el.dataset.status in window.__seen)) {
    window.__seen[el.dataset.status] = performance.timeOrigin + performance.now();
  }
}).observe(document, {subtree: true, childList: true, attributes: true});
"""


def setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")
    # Playwright's sync API runs an event loop in this thread; the ORM calls stay synchronous.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    import django

    django.setup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    database_url = os.environ.get("DATABASE_URL", "")
    events_url = os.environ.get("EVENTS_URL", "")
    if not database_url.startswith("postgres") or not events_url.startswith("redis"):
        raise SystemExit(
            "set DATABASE_URL=postgres://… and EVENTS_URL=redis://… (see the docstring)"
        )
    create_database(database_url)
    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    env = {**server_env(work), "PICNIC_VAR_DIR": str(work / "var"), "LOG_LEVEL": "WARNING"}
    setup_django(env)
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)

    from django.contrib.auth import get_user_model
    from django.test import Client
    from oauth2_provider.models import Application

    from actions.execution.models import ACTION_LIFECYCLE
    from actions.execution.services import action_create
    from core.lifecycle import Actor, transition
    from dev import processes

    users = get_user_model()
    staff, _ = users.objects.get_or_create(
        username="bench-live-staff", defaults={"is_staff": True, "is_superuser": True}
    )
    owner, _ = users.objects.get_or_create(username="bench-live-user")
    application, _ = Application.objects.get_or_create(
        name="bench-live",
        defaults={
            "client_type": Application.CLIENT_PUBLIC,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "user": owner,
        },
    )
    client = Client()
    client.force_login(staff)
    session = client.cookies["sessionid"].value

    port = free_port()
    web = processes.gunicorn(
        {**os.environ, **env}, work / "web.log", bind=f"127.0.0.1:{port}", workers=args.workers
    ).start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        import urllib.request

        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or not web.alive():
                    raise SystemExit(f"the web process did not come up:\n{web.log()}") from None
                time.sleep(0.3)

        from playwright.sync_api import sync_playwright

        latencies: dict[str, list[float]] = {"live": [], "polling": []}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
            )
            context = browser.new_context()
            context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
            context.add_init_script(OBSERVE)
            page = context.new_page()
            for round_no in range(args.rounds):
                modes = ["live", "polling"]
                random.shuffle(modes)
                for mode in modes:
                    action = action_create(
                        user=owner,
                        application=application,
                        type="cardFreeze",
                        summary="bench",
                        chain_id=31337,
                        smart_account="0x" + "ab" * 20,
                        params={},
                    )
                    query = "" if mode == "live" else "?live=0"
                    page.goto(f"{base}/staff/actions/{action.pk}/{query}")
                    if mode == "live":
                        page.wait_for_selector(".live[data-live-open]")
                    page.wait_for_selector('#timeline [data-status="proposed"]')
                    time.sleep(0.5)  # the stream's first re-check, if any, has come back
                    for status in STEPS:
                        time.sleep(random.uniform(0, 1))
                        started = time.time() * 1000
                        transition(
                            lifecycle=ACTION_LIFECYCLE,
                            pk=action.pk,
                            to=status,
                            actor=Actor.system(),
                        )
                        wait_from = time.monotonic()
                        while (seen := page.evaluate(f"window.__seen[{status!r}]")) is None:
                            if time.monotonic() - wait_from > 30:
                                raise SystemExit(f"{mode}: {status} never reached the page")
                            page.wait_for_timeout(5)
                        latencies[mode].append(seen - started)
                print(
                    f"round {round_no + 1}/{args.rounds}: "
                    + ", ".join(f"{m} last {latencies[m][-1]:.0f} ms" for m in ("live", "polling")),
                    flush=True,
                )
            browser.close()
    finally:
        web.stop()

    print()
    print(f"{'mode':<10}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}")
    for mode, values in latencies.items():
        print(
            f"{mode:<10}{len(values):>5}{statistics.median(values):>10.0f}"
            f"{percentile(values, 95):>10.0f}{max(values):>10.0f}"
        )
    live95 = percentile(latencies["live"], 95)
    poll95 = percentile(latencies["polling"], 95)
    print(f"\nlive p95 < 1000 ms: {'yes' if live95 < 1000 else 'NO'}")
    print(f"ratio polling p95 / live p95: {poll95 / live95:.1f}x")


if __name__ == "__main__":
    main()
