"""A stream lives no longer than its grant (mcp_adapter/grant_watch.py, `GrantWatch`): an open SSE
stream whose token is revoked, deleted by "Disconnect" or expired delivers nothing more and
ends; the task it followed stays readable by its owner with a new token. Raw streamable HTTP
against the real server (requests streaming), the worker's moves with the real services."""

from __future__ import annotations

import json
import queue
import threading
from datetime import timedelta

import pytest
import requests
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from core.lifecycle import Actor
from core.users import user_deactivate
from mcp_adapter.models import McpTask
from mcp_adapter.tests.conftest import DM_SCOPES, close_stream, open_get_stream
from mcp_adapter.tests.test_tasks import LEGACY, HttpRpc, _send

pytestmark = pytest.mark.django_db(transaction=True)
END = object()  # the server closed the stream


def _listen(http, rpc: HttpRpc) -> tuple[requests.Response, queue.Queue]:
    """The session's GET stream, read in a thread: every JSON-RPC message, then END."""
    stream = open_get_stream(http.url, rpc, LEGACY)
    received: queue.Queue = queue.Queue()

    def read():
        try:
            for line in stream.iter_lines(decode_unicode=True):
                if line and line.startswith("data:") and line[5:].strip():
                    received.put(json.loads(line[5:]))
        except requests.RequestException as exc:  # a broken (not a cleanly ended) stream
            received.put(exc)
        except AttributeError:  # closed by the test (urllib3 drops its socket)
            pass
        received.put(END)

    threading.Thread(target=read, daemon=True).start()
    return stream, received


def _status_notes(received: queue.Queue, task_id: str) -> list:
    """What the stream delivers until it ends: this task's status notifications (and any
    transport error, which would fail the caller's assertions)."""
    found = []
    while (message := received.get(timeout=15)) is not END:
        if isinstance(message, Exception):
            found.append(message)
        elif message.get("params", {}).get("taskId") == task_id:
            found.append(message["params"]["status"])
    return found


def _start_task(rpc: HttpRpc, dm) -> tuple[str, object]:
    task = rpc.call(
        "tools/call", {"name": "sosoapi_dm_actions_send", "arguments": dm(), "task": {}}
    )
    task_id = task["result"]["task"]["taskId"]
    return task_id, McpTask.objects.get(pk=task_id).entity_id


def _wait_for(received: queue.Queue, task_id: str, status: str) -> None:
    while True:
        message = received.get(timeout=10)
        assert message is not END, "the stream ended before the update"
        params = message.get("params", {})
        if params.get("taskId") == task_id and params.get("status") == status:
            return


def test_a_revoked_token_hears_nothing_after_the_revocation_and_the_task_stays_readable(
    http_server, dm, user, application, make_token
):
    # The default interval (30 s): what ends the stream here is the check at the event itself.
    with http_server() as http:
        rpc = HttpRpc(http.url, dm.token.token, LEGACY)
        stream, received = _listen(http, rpc)
        task_id, delivery_id = _start_task(rpc, dm)
        _send(delivery_id, "claimed")
        _wait_for(received, task_id, "working")  # the stream works while the token holds

        dm.token.revoke()  # what the RFC 7009 endpoint does
        _send(delivery_id, "sending", "sent")
        after = _status_notes(received, task_id)
        close_stream(stream)
        again = requests.get(
            http.url,
            headers={
                **rpc.headers,
                "Accept": "text/event-stream",
                "Mcp-Session-Id": rpc.session_id,
            },
            timeout=5,
        )
        fresh = make_token(user, application, scope=DM_SCOPES)
        task = HttpRpc(http.url, fresh.token, LEGACY).call("tasks/get", {"taskId": task_id})
    # Nothing after the revocation: neither "working" (sending) nor "completed" (sent), and
    # the stream ended cleanly (no transport error).
    assert after == []
    assert again.status_code == 401
    assert task["result"]["taskId"] == task_id and task["result"]["status"] == "completed"


def test_disconnect_on_the_connected_agents_page_ends_an_idle_stream(
    http_server, dm, user, application
):
    with http_server(STREAM_GRANT_CHECK_SECONDS=0.3) as http:
        rpc = HttpRpc(http.url, dm.token.token, LEGACY)
        stream, received = _listen(http, rpc)
        task_id, delivery_id = _start_task(rpc, dm)
        _send(delivery_id, "claimed")
        _wait_for(received, task_id, "working")

        page = Client()
        page.force_login(user)
        answer = page.post(f"/agents/{application.pk}/revoke")
        assert answer.status_code == 302
        # No event follows: the periodic re-check ends the stream by itself.
        assert _status_notes(received, task_id) == []
        _send(delivery_id, "sending")
        close_stream(stream)
    assert not type(dm.token).objects.filter(pk=dm.token.pk).exists()


@pytest.mark.parametrize("how", ["service", "queryset update"])
def test_deactivating_the_user_ends_their_stream_and_session(http_server, dm, user, how):
    """Deactivated means stopped: the service deletes the token; an update that sends no
    signal leaves it, and the re-check refuses an inactive user's token all the same."""
    with http_server(STREAM_GRANT_CHECK_SECONDS=0.3) as http:
        rpc = HttpRpc(http.url, dm.token.token, LEGACY)
        stream, received = _listen(http, rpc)
        task_id, delivery_id = _start_task(rpc, dm)
        _send(delivery_id, "claimed")
        _wait_for(received, task_id, "working")

        if how == "service":
            user_deactivate(user=user, actor=Actor.system())
        else:
            get_user_model().objects.filter(pk=user.pk).update(is_active=False)
        assert _status_notes(received, task_id) == []
        _send(delivery_id, "sending")
        close_stream(stream)
        again = requests.get(
            http.url,
            headers={
                **rpc.headers,
                "Accept": "text/event-stream",
                "Mcp-Session-Id": rpc.session_id,
            },
            timeout=5,
        )
    assert again.status_code == 401
    assert 'error="invalid_token"' in again.headers["WWW-Authenticate"]
    exists = type(dm.token).objects.filter(pk=dm.token.pk).exists()
    assert exists is (how != "service")


def test_an_expired_token_ends_the_stream(http_server, dm, user, application, make_token):
    token = make_token(user, application, scope=DM_SCOPES)
    with http_server(STREAM_GRANT_CHECK_SECONDS=0.3) as http:
        rpc = HttpRpc(http.url, token.token, LEGACY)
        stream, received = _listen(http, rpc)
        type(token).objects.filter(pk=token.pk).update(
            expires=timezone.now() - timedelta(seconds=1)
        )
        assert received.get(timeout=15) is END
        close_stream(stream)


def test_a_stream_with_a_valid_token_outlives_its_checks(http_server, dm):
    """The control: re-checks of a token that holds change nothing."""
    with http_server(STREAM_GRANT_CHECK_SECONDS=0.2) as http:
        rpc = HttpRpc(http.url, dm.token.token, LEGACY)
        stream, received = _listen(http, rpc)
        task_id, delivery_id = _start_task(rpc, dm)
        # Several checks pass before the first event (a handful of 0.2 s intervals).
        threading.Event().wait(1.0)
        _send(delivery_id, "claimed", "sending", "sent")
        _wait_for(received, task_id, "completed")
        close_stream(stream)
