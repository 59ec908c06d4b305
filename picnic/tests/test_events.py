"""The event channel: what a transition publishes reaches a listener in another process's
place (a separate socket / Redis connection), on both backends."""

from __future__ import annotations

import anyio
import pytest

from actions.services.lifecycle import action_create
from actions.services.transitions import action_transition
from picnic import events
from picnic.lifecycle import Actor


@pytest.mark.django_db(transaction=True)
def test_a_committed_transition_is_published(backend, user, application):
    action = action_create(
        user=user,
        application=application,
        type="cardFreeze",
        summary="s",
        chain_id=31337,
        smart_account="0x" + "ab" * 20,
        params={},
    )

    async def body():
        async with events.subscribe() as subscription:
            await anyio.to_thread.run_sync(
                lambda: action_transition(
                    action_id=action.pk, to="rejected", actor=Actor.system(), detail="test"
                )
            )
            # Redis pub/sub ignores the database number: other systems on the same server
            # (a `make run`, a parallel run) may publish too, so wait for this action's event.
            with anyio.fail_after(2):
                while True:
                    event = await subscription.receive()
                    if event.get("id") == str(action.pk):
                        return event

    event = anyio.run(body)
    assert event == {
        "lifecycle": "action",
        "id": str(action.pk),
        "status": "rejected",
        "uri": f"picnic://action/{action.pk}",
    }


def test_a_vanished_local_listener_is_forgotten(settings, tmp_path):
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    settings.EVENTS_DIR.mkdir()
    stale = settings.EVENTS_DIR / "gone.sock"
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(stale))
    sock.close()  # the file stays, nobody reads it
    events.publish({"uri": "picnic://action/x"})
    assert not stale.exists()
