"""The MCP task admin: read-only, found by its own id or its entity's, linked to the timeline."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from mcp_adapter.models import McpTask, TaskKind, TaskStatus
from mcp_adapter.tests.conftest import make_action

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/mcp_adapter/mcptask/"


def _task(user, application, entity_id) -> McpTask:
    now = timezone.now()
    return McpTask.objects.create(
        user=user,
        application=application,
        tool="card_freeze",
        kind=TaskKind.ACTION,
        entity_id=entity_id,
        protocol_version="2025-11-25",
        status=TaskStatus.WORKING,
        status_message="Waiting for the user's passkey signature",
        ttl_ms=60_000,
        expires_at=now + timedelta(minutes=1),
    )


def test_a_task_is_found_by_its_id_or_its_actions_and_links_to_the_timeline(
    staff_client, user, application
):
    action = make_action(user, application)
    task = _task(user, application, action.pk)
    other = _task(user, application, None)

    for term in (str(task.pk), str(action.pk)):
        page = staff_client.get(CHANGELIST, {"q": term})
        assert page.status_code == 200
        assert list(page.context["cl"].result_list) == [task]
    for term in ("card_freeze", str(uuid.uuid4())):
        page = staff_client.get(CHANGELIST, {"q": term})
        assert page.status_code == 200 and list(page.context["cl"].result_list) == []
    # Django's search form drops a term with a NUL (the whole list, never a 500).
    assert staff_client.get(CHANGELIST, {"q": f"{task.pk}\x00"}).status_code == 200
    assert len(staff_client.get(CHANGELIST).context["cl"].result_list) == 2

    change = staff_client.get(f"{CHANGELIST}{task.pk}/change/")
    assert change.status_code == 200
    assert f"/staff/actions/{action.pk}/" in change.content.decode()
    assert "refused at once" in staff_client.get(f"{CHANGELIST}{other.pk}/change/").content.decode()


def test_tasks_cannot_be_added_changed_or_deleted_by_hand(staff_client, user, application):
    task = _task(user, application, None)
    assert staff_client.get(f"{CHANGELIST}add/").status_code == 403
    assert staff_client.post(f"{CHANGELIST}{task.pk}/delete/", {"post": "yes"}).status_code == 403
    staff_client.post(
        f"{CHANGELIST}{task.pk}/change/", {"status": TaskStatus.CANCELLED, "tool": "x"}
    )
    task.refresh_from_db()
    assert task.status == TaskStatus.WORKING and task.tool == "card_freeze"
