"""Live updates (core/live.py): server-sent events through the ASGI entry point, served by a
real uvicorn on picnic.asgi, fed by transitions committed in this (another) process."""

from __future__ import annotations

import http.client
import json
import threading
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connections
from django.test import Client

from actions.execution.models import ACTION_LIFECYCLE
from actions.tests.factories import make_card_freeze
from core.lifecycle import Actor, transition
from dev.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]


class Stream:
    """One text/event-stream read line by line, as EventSource does."""

    def __init__(self, port: int, path: str, session: str | None):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        headers = {"Accept": "text/event-stream"}
        if session:
            headers["Cookie"] = f"{django_settings.SESSION_COOKIE_NAME}={session}"
        self.conn.request("GET", path, headers=headers)
        self.response = self.conn.getresponse()

    def next(self, *, comments: bool = False) -> dict | None:
        """The next event (`{"event", "data", "retry"?}`), a comment (`{"comment"}`) if asked
        for, or None at the end of the stream."""
        message: dict = {}
        while True:
            line = self.response.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if line == "":
                if message:
                    if "data" in message:
                        message["data"] = json.loads(message["data"])
                    return message
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "":
                if comments:
                    return {"comment": value}
                continue
            message[field] = value

    def close(self) -> None:
        self.conn.close()


def _session(client, user) -> str:
    client.force_login(user)
    return client.cookies[django_settings.SESSION_COOKIE_NAME].value


def _action(user, application):
    return make_card_freeze(user=user, application=application)


def _in_another_thread(fn) -> None:
    """A transition committed by another connection, as a worker's would be."""
    errors: list[BaseException] = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


@pytest.mark.django_db(transaction=True)
def test_it_streams_the_entitys_transitions_only_and_ends_at_its_terminal_status(
    backend, asgi_server, client, staff_user, user, application
):
    watched, other = _action(user, application), _action(user, application)
    server = asgi_server()
    stream = Stream(
        server.port, f"/staff/events?lifecycle=action&id={watched.pk}", _session(client, staff_user)
    )
    assert stream.response.status == 200
    assert stream.response.headers["Content-Type"].startswith("text/event-stream")
    first = stream.next()
    # Sent once subscribed: the page re-checks whatever it may have missed.
    assert first == {"retry": "1000", "event": "changed", "data": {"connected": True}}

    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=other.pk, to="signed", actor=Actor.system()
        )
    )
    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=watched.pk, to="signed", actor=Actor.system()
        )
    )
    # The other action's event was published first and filtered out.
    assert stream.next() == {
        "event": "changed",
        "data": {"lifecycle": "action", "id": str(watched.pk), "status": "signed"},
    }
    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=watched.pk,
            to="failed",
            actor=Actor.system(),
            detail="test",
        )
    )
    final = {"lifecycle": "action", "id": str(watched.pk), "status": "failed"}
    assert stream.next() == {"event": "changed", "data": final}
    assert stream.next() == {"event": "end", "data": final}
    assert stream.next() is None  # the server closed the stream
    stream.close()

    # A reconnection to a terminal entity gets `end` at once (the page stops listening).
    again = Stream(
        server.port, f"/staff/events?lifecycle=action&id={watched.pk}", _session(client, staff_user)
    )
    assert again.next() == {"event": "end", "data": {"reason": "terminal"}}
    assert again.next() is None


@pytest.mark.django_db(transaction=True)
def test_the_console_stream_carries_every_lifecycle_and_the_signing_stream_the_owners_action(
    backend, asgi_server, client, staff_user, user, application
):
    action = _action(user, application)
    server = asgi_server()
    console = Stream(server.port, "/staff/events", _session(client, staff_user))
    # Its own client: logging the user in on the staff's client would end the staff session
    # (and with it the console stream, at its next event).
    signing = Stream(server.port, f"/sign/{action.pk}/events", _session(Client(), user))
    assert console.next()["data"] == {"connected": True}
    assert signing.next()["data"] == {"connected": True}

    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to="rejected", actor=Actor.end_user(user)
        )
    )
    expected = {"lifecycle": "action", "id": str(action.pk), "status": "rejected"}
    assert signing.next() == {"event": "changed", "data": expected}
    assert signing.next() == {"event": "end", "data": expected}
    # The console stream sees every event on the channel (on Redis other systems may publish
    # too): it carries this one and stays open after a terminal status.
    seen = console.next()
    while seen["data"].get("id") != str(action.pk):
        seen = console.next()
    assert seen == {"event": "changed", "data": expected}
    console.close()
    signing.close()


@pytest.mark.django_db(transaction=True)
def test_the_subscription_is_released_when_the_client_disconnects(
    settings, tmp_path, asgi_server, client, staff_user, user, application
):
    # The local channel makes a subscription visible: one socket file per listener.
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    action = _action(user, application)
    server = asgi_server(LIVE_HEARTBEAT_SECONDS="0.2")
    stream = Stream(
        server.port, f"/staff/events?lifecycle=action&id={action.pk}", _session(client, staff_user)
    )
    assert stream.next()["data"] == {"connected": True}
    assert stream.next(comments=True) == {"comment": "keepalive"}
    assert len(list(settings.EVENTS_DIR.glob("*.sock"))) == 1
    stream.close()
    wait_until(lambda: not list(settings.EVENTS_DIR.glob("*.sock")), timeout=10)
    assert server.proc.poll() is None


@pytest.mark.django_db(transaction=True)
def test_a_stream_ends_after_its_lifetime_and_the_browser_reconnects(
    settings, tmp_path, asgi_server, client, staff_user
):
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    server = asgi_server(LIVE_STREAM_SECONDS="0.5", LIVE_RETRY_MS="250")
    stream = Stream(server.port, "/staff/events", _session(client, staff_user))
    assert stream.next() == {"retry": "250", "event": "changed", "data": {"connected": True}}
    assert stream.next() is None  # ended; EventSource reconnects after `retry` ms
    wait_until(lambda: not list(settings.EVENTS_DIR.glob("*.sock")), timeout=10)


# --- refusals (nothing streams: Django's test client is enough) ------------------------------


@pytest.mark.django_db
def test_it_refuses_the_staff_stream_to_anonymous_and_non_staff_users(client, user):
    response = client.get("/staff/events")
    assert response.status_code == 403
    assert response.json() == {"detail": "Staff only", "code": "permission_denied", "errors": {}}
    client.force_login(user)
    assert client.get("/staff/events?lifecycle=action").status_code == 403


@pytest.mark.django_db
def test_it_refuses_the_signing_stream_of_another_users_action(
    client, user, other_user, application
):
    action = _action(user, application)
    anonymous = client.get(f"/sign/{action.pk}/events")
    assert anonymous.status_code == 403
    assert anonymous.json()["code"] == "not_authenticated"
    client.force_login(other_user)
    refused = client.get(f"/sign/{action.pk}/events")
    assert refused.status_code == 403
    assert refused.json()["code"] == "permission_denied"


@pytest.mark.django_db
def test_it_answers_404_and_400_for_unknown_entities_and_lifecycles(staff_client):
    unknown = staff_client.get(
        "/staff/events?lifecycle=action&id=00000000-0000-0000-0000-000000000000"
    )
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"
    assert staff_client.get("/staff/events?lifecycle=action&id=nope").status_code == 404
    assert staff_client.get("/staff/events?lifecycle=nope").status_code == 400
    assert staff_client.get("/staff/events?id=1").status_code == 400


@pytest.mark.django_db
def test_under_wsgi_the_stream_ends_at_once_and_the_page_keeps_polling(staff_client):
    # Django's test client is WSGI: an endless stream would be read into memory there.
    response = staff_client.get("/staff/events")
    assert response["Content-Type"] == "text/event-stream"
    body = b"".join(response.streaming_content).decode()
    assert body.startswith("event: end\n")


@pytest.mark.django_db
def test_the_timeline_page_opens_its_stream_unless_asked_not_to(staff_client, user, application):
    action = _action(user, application)
    page = staff_client.get(f"/staff/actions/{action.pk}/").content.decode()
    assert f'sse-connect="/staff/events?lifecycle=action&amp;id={action.pk}"' in page
    assert 'hx-trigger="sse:changed, every 2s"' in page
    polling_only = staff_client.get(f"/staff/actions/{action.pk}/?live=0").content.decode()
    assert "sse-connect" not in polling_only
    assert 'hx-trigger="sse:changed, every 2s"' in polling_only


# --- a stream lives no longer than its session -----------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_logout_ends_the_signing_stream_before_the_next_event(
    settings, tmp_path, asgi_server, client, user, application
):
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    action = _action(user, application)
    # The default interval (30 s): the check at the event is what ends this stream.
    server = asgi_server()
    signing = Stream(server.port, f"/sign/{action.pk}/events", _session(client, user))
    assert signing.next()["data"] == {"connected": True}
    client.logout()  # the session is deleted, as the logout view does
    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to="rejected", actor=Actor.system()
        )
    )
    # Not the transition: the stream ends (and EventSource does not reconnect after `end`).
    assert signing.next() == {"event": "end", "data": {"reason": "signed out"}}
    assert signing.next() is None
    signing.close()


@pytest.mark.django_db(transaction=True)
def test_a_staff_user_losing_is_staff_loses_the_console_stream(
    settings, tmp_path, asgi_server, client, staff_user, user, application
):
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    action = _action(user, application)
    server = asgi_server(STREAM_GRANT_CHECK_SECONDS="0.2", LIVE_HEARTBEAT_SECONDS="0.1")
    console = Stream(server.port, "/staff/events", _session(client, staff_user))
    assert console.next()["data"] == {"connected": True}
    # Re-checks of a session that holds change nothing: keepalives, then the event.
    for _ in range(5):
        assert console.next(comments=True) == {"comment": "keepalive"}
    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to="signed", actor=Actor.system()
        )
    )
    seen = console.next()
    while seen["data"].get("id") != str(action.pk):
        seen = console.next()
    assert seen["data"]["status"] == "signed"

    type(staff_user).objects.filter(pk=staff_user.pk).update(is_staff=False)
    # No event needed: the periodic check ends the stream.
    assert console.next() == {"event": "end", "data": {"reason": "signed out"}}
    assert console.next() is None
    console.close()
    wait_until(lambda: not list(settings.EVENTS_DIR.glob("*.sock")), timeout=10)


@pytest.mark.django_db(transaction=True)
def test_a_staff_user_losing_the_view_permission_loses_the_console_stream(
    settings, tmp_path, asgi_server, client, make_user
):
    from django.contrib.auth.models import Permission

    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    viewer = make_user("vera", is_staff=True)
    permission = Permission.objects.get(codename="view_action", content_type__app_label="actions")
    viewer.user_permissions.add(permission)
    server = asgi_server(STREAM_GRANT_CHECK_SECONDS="0.2", LIVE_HEARTBEAT_SECONDS="0.1")
    console = Stream(server.port, "/staff/events?lifecycle=action", _session(client, viewer))
    assert console.next()["data"] == {"connected": True}
    for _ in range(3):  # re-checks of a permission that holds change nothing
        assert console.next(comments=True) == {"comment": "keepalive"}

    viewer.user_permissions.remove(permission)
    assert console.next() == {"event": "end", "data": {"reason": "signed out"}}
    assert console.next() is None
    console.close()
    wait_until(lambda: not list(settings.EVENTS_DIR.glob("*.sock")), timeout=10)
