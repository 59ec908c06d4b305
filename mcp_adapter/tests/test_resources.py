"""picnic://action/{id}: readable, subscribable, and every transition of a subscribed action
reaches the subscriber as notifications/resources/updated (through core.events, no polling)."""

from __future__ import annotations

import json
import uuid

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from actions.execution.signing import action_reject
from mcp_adapter.tests.conftest import run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application, scope="read:actions")


def test_the_resource_reads_as_the_status_json(make_server, action, token):
    async def body():
        async with Client(make_server(token.token)) as client:
            return await client.read_resource(action.resource_uri)

    result = run(body)
    data = json.loads(result.contents[0].text)
    assert data["action_id"] == str(action.pk) and data["status"] == "proposed"


def test_a_legacy_subscriber_is_notified_of_each_transition_within_a_second(
    make_server, action, token, user
):
    server = make_server(token.token)
    received: list[str] = []
    got = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            received.append(str(message.params.uri))
            got.set()

    async def body():
        async with server.event_pump():
            async with Client(server, mode="legacy", message_handler=on_message) as client:
                assert client.server_capabilities.resources.subscribe is True
                await client.subscribe_resource(action.resource_uri)
                # The user declines on the signing page (another thread, like another process).
                await anyio.to_thread.run_sync(
                    lambda: action_reject(action_id=action.pk, user=user)
                )
                with anyio.fail_after(1):
                    await got.wait()

    run(body)
    assert received == [action.resource_uri]


def test_a_listen_stream_gets_the_update_too(make_server, action, token, user):
    server = make_server(token.token)

    async def body():
        async with server.event_pump():
            async with Client(server) as client:
                async with client.listen(resource_subscriptions=[action.resource_uri]) as sub:
                    await anyio.to_thread.run_sync(
                        lambda: action_reject(action_id=action.pk, user=user)
                    )
                    with anyio.fail_after(1):
                        async for event in sub:
                            return event

    event = run(body)
    assert event.uri == action.resource_uri


def test_nobody_subscribes_to_another_users_action(
    make_server, action, other_user, application, make_token
):
    intruder = make_token(other_user, application, scope="read:actions")

    async def body():
        async with Client(make_server(intruder.token), mode="legacy") as client:
            try:
                await client.subscribe_resource(action.resource_uri)
            except MCPError as exc:
                return exc

    error = run(body)
    assert isinstance(error, MCPError)
    assert "Action does not belong to the authenticated user" in str(error)


def test_an_action_the_caller_cannot_read_is_invalid_params(
    make_server, action, token, other_user, application, make_token
):
    """SEP-2164: a well-formed URI naming no resource (for this caller) is -32602, never the
    internal error."""
    intruder = make_token(other_user, application, scope="read:actions")

    async def read(server, uri):
        async with Client(server) as client:
            try:
                await client.read_resource(uri)
            except MCPError as exc:
                return exc

    unknown = run(read, make_server(token.token), "picnic://action/" + str(uuid.uuid4()))
    foreign = run(read, make_server(intruder.token), action.resource_uri)
    assert unknown.error.code == types.INVALID_PARAMS
    assert unknown.error.message.startswith("Action not found: ")
    assert foreign.error.code == types.INVALID_PARAMS
    assert foreign.error.message == "Action does not belong to the authenticated user"
