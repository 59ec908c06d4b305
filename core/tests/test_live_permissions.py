"""`/staff/events` carries only the kinds of work the staff member may view (the console's
stream): over a real uvicorn on picnic.asgi, a member who may view deliveries only hears a
delivery's transition and never an action's, though the action's was published first."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from actions.execution.models import ACTION_LIFECYCLE
from core.lifecycle import Actor, transition
from core.tests.test_live import Stream, _action, _in_another_thread, _session
from messaging.models import D
from messaging.services import delivery_cancel
from messaging.tests.conftest import (  # noqa: F401 - fixtures
    make_delivery,
    member,
    social_account,
    workspace,
)


@pytest.mark.django_db(transaction=True)
def test_the_console_stream_carries_only_the_kinds_the_member_may_view(
    backend,
    asgi_server,
    client,
    make_user,
    user,
    application,
    make_delivery,  # noqa: F811
):
    viewer = make_user("dee", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_delivery"))
    action = _action(user, application)
    delivery = make_delivery()
    server = asgi_server()
    stream = Stream(server.port, "/staff/events", _session(client, viewer))
    assert stream.response.status == 200
    assert stream.next()["data"] == {"connected": True}

    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to="rejected", actor=Actor.end_user(user)
        )
    )
    _in_another_thread(
        lambda: delivery_cancel(delivery=delivery, user=viewer, staff=True, note="test")
    )
    seen = stream.next()
    while seen["data"].get("id") != str(delivery.pk):
        assert seen["data"].get("lifecycle") == "delivery", seen  # nothing of another kind
        seen = stream.next()
    assert seen == {
        "event": "changed",
        "data": {"lifecycle": "delivery", "id": str(delivery.pk), "status": D.CANCELLED},
    }
    stream.close()
    # One lifecycle the member may not view: refused before any stream.
    refused = Stream(server.port, "/staff/events?lifecycle=action", _session(client, viewer))
    assert refused.response.status == 403
    refused.close()
