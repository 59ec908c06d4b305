"""Web workers and Celery workers freeze their start-up objects (core/gc_freeze.py): the hooks
that production start-up calls, each in a fresh process, as that process would run them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = (
    "import gc, json, os, sys, types, django; django.setup(); "
    "before = gc.get_freeze_count(); url_conf_before = 'picnic.urls' in sys.modules; "
    "from celery.signals import worker_init, worker_process_init; "
    "from picnic import celery, gunicorn_conf; "
    # A receiver is held by a weak reference (a module's function) or directly.
    "name = lambda r: getattr(r[-1], '__qualname__', '') or getattr(r[-1](), '__qualname__', ''); "
    "hook = sys.argv[1]; "
    "gunicorn_conf.post_worker_init(types.SimpleNamespace(pid=os.getpid())) "
    "if hook == 'web' else getattr(celery, hook)(); "
    "print(json.dumps({'before': before, 'after': gc.get_freeze_count(), "
    "'url_conf_before': url_conf_before, 'url_conf_after': 'picnic.urls' in sys.modules, "
    "'worker_init': [name(r) for r in worker_init.receivers], "
    "'worker_process_init': [name(r) for r in worker_process_init.receivers]}))"
)

HOOKS = ("web", "_freeze_after_start_up", "_freeze_in_pool_process")


def _start(hook: str, **env: str) -> tuple[dict, str]:
    environ = {k: v for k, v in os.environ.items() if k != "GC_FREEZE_AT_STARTUP"}
    environ.update(DJANGO_SETTINGS_MODULE="picnic.settings", LOG_FORMAT="text", **env)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, hook],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stdout + result.stderr


def test_each_start_up_hook_warms_up_then_freezes_and_says_how_many():
    for hook in HOOKS:
        probe, output = _start(hook)
        assert probe["before"] == 0, hook
        assert probe["after"] > 10_000, (hook, probe["after"])  # Django and the URL conf's
        # The warm-up loaded the URL conf (and its views) before the freeze.
        assert not probe["url_conf_before"] and probe["url_conf_after"], hook
        said = re.search(r"gc\.freeze after start-up: (\d+) objects frozen", output)
        assert said, output
        # The count when it was logged: an object or two may be freed since.
        assert int(said[1]) >= probe["after"] > int(said[1]) - 100, output


def test_the_celery_hooks_are_connected_to_the_worker_signals():
    probe, _ = _start("_freeze_in_pool_process", GC_FREEZE_AT_STARTUP="0")
    assert "_freeze_after_start_up" in probe["worker_init"]
    assert "_freeze_in_pool_process" in probe["worker_process_init"]


def test_gc_freeze_at_startup_off_freezes_nothing():
    for hook in HOOKS:
        probe, output = _start(hook, GC_FREEZE_AT_STARTUP="0")
        assert probe["after"] == 0, hook
        assert "objects frozen" not in output
        assert "gc.freeze at start-up is off (GC_FREEZE_AT_STARTUP)" in output
