"""Every task handed over with `enqueue_on_commit` names a Celery task that exists.

The hand-over runs after commit and is robust (a broker that refuses must never undo
committed work), so a dotted path that no longer resolves only logs an error while the work
waits for beat: a rename would go unseen by every test that does not run the task itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from celery import Task
from django.utils.module_loading import import_string

ROOT = Path(__file__).resolve().parents[2]
APPS = ("actions", "core", "messaging", "oauth", "operations", "console", "mcp_adapter")


def _constants(tree: ast.Module) -> dict[str, str]:
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }


def _modules() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text())
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "tests" not in path.parts and "migrations" not in path.parts
    }


def _handed_over() -> list[tuple[str, str]]:
    modules = _modules()
    # A path named by a module constant may be imported from another module (DISPATCH_TASK).
    constants = {k: v for tree in modules.values() for k, v in _constants(tree).items()}
    found = []
    for path, tree in modules.items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "enqueue_on_commit"
                and node.args
            ):
                first = node.args[0]
                dotted = first.value if isinstance(first, ast.Constant) else constants[first.id]
                found.append((str(path.relative_to(ROOT)), dotted))
    return found


def test_every_enqueued_task_path_names_a_celery_task():
    handed_over = _handed_over()
    assert len(handed_over) >= 6  # the actions, account changes, deliveries, operations, logos
    for where, dotted in handed_over:
        assert isinstance(import_string(dotted), Task), f"{where}: {dotted}"


@pytest.mark.django_db
def test_a_hand_over_the_broker_refuses_leaves_no_span_current(
    switch_broker, django_capture_on_commit_callbacks, caplog, monkeypatch
):
    # The Celery instrumentation's publish span is made current before the send; a send that
    # raises never restores the context, and every later piece of work in the thread (the
    # next request, the next beat batch) would carry that span's trace id.
    from core import tracing
    from core.lifecycle import enqueue_on_commit
    from picnic.celery import app

    switch_broker("redis://127.0.0.1:1/0")  # nothing listens there
    monkeypatch.setitem(app.conf, "task_publish_retry", False)  # fail at once
    monkeypatch.setitem(app.conf, "broker_connection_max_retries", 0)
    with django_capture_on_commit_callbacks(execute=True):
        enqueue_on_commit("messaging.tasks.delivery_deliver", "1")
    assert any(r.exc_info for r in caplog.records)  # the send did fail
    assert tracing.current() is None
