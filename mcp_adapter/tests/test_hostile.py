"""What a hostile or careless agent sends through the adapter.

Path arguments are one quoted path segment (no `../profile`, no `?query`), empty ones are
refused before any call, a 2xx that is not the tool's JSON object is an error, and every
subscription path (resources/subscribe, subscriptions/listen) only follows the caller's own
actions."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from actions.execution.models import Action
from actions.execution.signing import action_reject
from mcp_adapter.api import PicnicApi, path_segment
from mcp_adapter.server import PicnicMCP
from mcp_adapter.tests.conftest import make_action, run

pytestmark = pytest.mark.django_db(transaction=True)

ALL_READS = "read:actions read:profile read:transactions operations:read"


async def _call(server, name, arguments):
    async with Client(server) as client:
        return await client.call_tool(name, arguments)


def test_path_segment_quotes_everything_that_could_leave_the_segment():
    assert path_segment("../profile") == "%2E%2E%2Fprofile"
    assert path_segment("x?limit=1#f") == "x%3Flimit%3D1%23f"
    assert path_segment("%2F") == "%252F"


@pytest.mark.parametrize(
    "action_id",
    [
        "../profile",
        "../transactions?limit=1",
        "../operations/" + str(uuid.UUID(int=1)),
        "..",
        ".",
        "transfer",
        "card_limit",
        "a/b/",
    ],
)
def test_an_action_id_cannot_reach_another_route(
    make_server, user, application, make_token, action_id
):
    token = make_token(user, application, scope=ALL_READS)
    result = run(_call, make_server(token.token), "get_action_status", {"action_id": action_id})
    assert result.is_error
    assert result.content[0].text == f"Action not found: {action_id}"


def test_a_query_after_the_id_is_part_of_the_id(make_server, action, token_all):
    action_id = f"{action.pk}?x=1"
    result = run(_call, make_server(token_all.token), "get_action_status", {"action_id": action_id})
    assert result.is_error and result.content[0].text == f"Action not found: {action_id}"


@pytest.fixture
def token_all(user, application, make_token):
    return make_token(user, application, scope=ALL_READS)


@pytest.mark.parametrize(
    ("action_id", "reason"),
    [("", "must not be empty"), ("\n", "must not contain control characters")],
)
def test_an_empty_path_argument_is_refused_before_any_call(
    make_server, token_all, monkeypatch, action_id, reason
):
    server = make_server(token_all.token)
    calls = []
    monkeypatch.setattr(server.api, "_call", lambda *args: calls.append(args))
    result = run(_call, server, "get_action_status", {"action_id": action_id})
    assert result.is_error
    assert result.content[0].text == f"Invalid input: action_id: {reason}"
    assert calls == []


def test_an_operation_id_that_is_not_a_uuid_is_refused(make_server, token_all):
    result = run(_call, make_server(token_all.token), "tong_operation_status", {"operation_id": ""})
    assert result.is_error
    assert result.content[0].text.startswith("Invalid input: operation_id: ")


class _Answers(BaseHTTPRequestHandler):
    """An upstream that answers 200 with what the test put in `bodies` for the path."""

    bodies: dict[str, tuple[str, bytes]] = {}

    def do_GET(self):  # noqa: N802 - the stdlib's name
        content_type, body = self.bodies[self.path]
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=5)


@pytest.mark.parametrize(
    ("content_type", "body", "output_schemas", "expected"),
    [
        (
            "text/html",
            b"<html>ok</html>",
            False,
            "The Picnic API answered 200 without a JSON object",
        ),
        ("application/json", b"[1, 2]", False, "The Picnic API answered 200 without a JSON object"),
        (
            "application/json",
            b'{"unexpected": 1}',
            True,
            "The Picnic API's answer does not match the tool's schema: ",
        ),
    ],
)
def test_a_2xx_that_is_not_the_tools_json_object_is_an_error(
    upstream, events_dir, content_type, body, output_schemas, expected
):
    _Answers.bodies = {"/api/v1/actions/x": (content_type, body)}
    server = PicnicMCP(api=PicnicApi(upstream), token="t", output_schemas=output_schemas)
    result = run(_call, server, "get_action_status", {"action_id": "x"})
    assert result.is_error
    assert result.content[0].text.startswith(expected)
    if output_schemas:  # the schema's own words name what is wrong
        assert "'action_id' is a required property" in result.content[0].text


# --- the tool routes as ids ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["transfer", "swap", "card_freeze", "card_unfreeze", "card_limit"])
def test_a_get_of_a_tool_route_is_an_action_that_does_not_exist(
    api_client, user, application, make_token, name
):
    token = make_token(user, application, scope="read:actions")
    response = api_client.get(f"/api/v1/actions/{name}", token)
    assert response.status_code == 404
    assert response.json() == {
        "detail": f"Action not found: {name}",
        "code": "not_found",
        "errors": {},
    }


def test_an_id_with_a_slash_is_not_found_in_the_error_shape(api_client, token_all):
    response = api_client.get("/api/v1/actions/..%2Fprofile", token_all)
    assert response.status_code == 404
    assert response.json() == {
        "detail": "Action not found: ../profile",
        "code": "not_found",
        "errors": {},
    }


def test_a_tool_route_still_takes_the_tools_post(api_client, user, application, make_token):
    token = make_token(user, application, scope="write:actions")
    before = Action.objects.count()
    response = api_client.post("/api/v1/actions/transfer", token, {"amount": "1"})
    # The tool's own validation answered (not the status view, not a 405).
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input"
    assert "asset_id" in response.json()["errors"]
    assert Action.objects.count() == before


# --- item 7: every subscription path follows only the caller's actions -------------------------


def test_a_listen_stream_over_http_never_carries_another_users_action(
    http_server,
    user,
    other_user,
    application,
    make_token,
):
    victim = make_action(user, application)
    own = make_action(other_user, application)
    intruder = make_token(other_user, application, scope="read:actions")
    received: list[str] = []

    async def body(url):
        headers = {"Authorization": f"Bearer {intruder.token}"}
        async with httpx2.AsyncClient(headers=headers) as http_client:
            async with Client(streamable_http_client(url, http_client=http_client)) as client:
                uris = [victim.resource_uri, own.resource_uri, "picnic://action/nope"]
                async with client.listen(resource_subscriptions=uris) as sub:
                    honored = list(sub.honored.resource_subscriptions or [])
                    # The victim's action moves first, then the intruder's own: had the first
                    # been delivered, it would arrive before the second.
                    await anyio.to_thread.run_sync(
                        lambda: action_reject(action_id=victim.pk, user=user)
                    )
                    await anyio.to_thread.run_sync(
                        lambda: action_reject(action_id=own.pk, user=other_user)
                    )
                    with anyio.fail_after(5):
                        async for event in sub:
                            received.append(event.uri)
                            if event.uri == own.resource_uri:
                                break
                return honored

    with http_server() as http:
        honored = run(body, http.url)
    assert honored == [own.resource_uri]
    assert received == [own.resource_uri]


def test_a_listen_stream_with_only_another_users_action_honours_nothing(
    make_server, action, other_user, application, make_token
):
    intruder = make_token(other_user, application, scope="read:actions")

    async def body():
        async with Client(make_server(intruder.token)) as client:
            async with client.listen(resource_subscriptions=[action.resource_uri]) as sub:
                return sub.honored

    honored = run(body)
    assert not honored.resource_subscriptions


def test_a_legacy_subscribe_over_http_to_another_users_action_is_refused(
    http_server,
    action,
    other_user,
    application,
    make_token,
):
    from mcp.shared.exceptions import MCPError

    intruder = make_token(other_user, application, scope="read:actions")

    async def body(url):
        headers = {"Authorization": f"Bearer {intruder.token}"}
        async with httpx2.AsyncClient(headers=headers) as http_client:
            transport = streamable_http_client(url, http_client=http_client)
            async with Client(transport, mode="legacy") as client:
                with pytest.raises(MCPError) as refused:
                    await client.subscribe_resource(action.resource_uri)
                return str(refused.value)

    with http_server() as http:
        message = run(body, http.url)
    assert "Action does not belong to the authenticated user" in message


def test_a_listen_request_with_too_many_uris_is_refused(make_server, token_all):
    from mcp.shared.exceptions import MCPError

    from mcp_adapter.server import MAX_LISTEN_URIS

    uris = [f"picnic://action/{uuid.uuid4()}" for _ in range(MAX_LISTEN_URIS + 1)]

    async def body():
        async with Client(make_server(token_all.token)) as client:
            with pytest.raises(MCPError) as refused:
                async with client.listen(resource_subscriptions=uris):
                    pass
            return str(refused.value)

    assert f"At most {MAX_LISTEN_URIS} resource subscriptions" in run(body)


def test_the_resource_read_quotes_its_id(make_server, action, token_all):
    from mcp.shared.exceptions import MCPError

    # The SDK decodes the template's value: this reads the action id "<pk>?x=1".
    uri = f"picnic://action/{action.pk}%3Fx%3D1"

    async def body():
        async with Client(make_server(token_all.token)) as client:
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            return str(refused.value)

    assert run(body) == f"Action not found: {action.pk}?x=1"


def test_the_status_json_is_unchanged_for_a_real_id(make_server, action, token_all):
    result = run(
        _call, make_server(token_all.token), "get_action_status", {"action_id": str(action.pk)}
    )
    assert result.is_error is False
    assert json.loads(result.content[0].text)["action_id"] == str(action.pk)


# --- no echo of long values -----------------------------------------------------------

LONG = "x" * 60_000


async def _protocol_error(server, call):
    from mcp.shared.exceptions import MCPError

    async with Client(server) as client:
        try:
            await call(client)
        except MCPError as exc:
            return exc
    raise AssertionError("no error")


def test_a_60_kb_tool_name_is_not_echoed(make_server, token_all):
    error = run(_protocol_error, make_server(token_all.token), lambda c: c.call_tool(LONG, {}))
    assert error.error.message == "Unknown tool: " + repr("x" * 32) + "…"


def test_a_60_kb_resource_uri_is_not_echoed(make_server, token_all):
    from mcp import types

    for uri in ("picnic://action/" + LONG, "picnic://nothing/" + LONG):
        error = run(
            _protocol_error, make_server(token_all.token), lambda c, u=uri: c.read_resource(u)
        )
        assert error.error.code == types.INVALID_PARAMS
        assert len(error.error.message) < 200, error.error.message[:200]
        assert LONG[:100] not in json.dumps(error.error.data)


def test_a_60_kb_subscription_uri_is_not_echoed(make_server, token_all):
    # The refusal resources/subscribe answers with (the SDK client of this protocol version
    # does not send the request): named, not echoed, and no API call for a URI of no resource.
    server = make_server(token_all.token)
    refusal = run(server._refusal, "picnic://nothing/" + LONG)
    assert refusal == "Not a subscribable resource: " + repr("picnic://nothing/" + "x" * 15) + "…"
    assert run(server._refusal, "picnic://action/" + LONG).startswith("Not a subscribable")


def test_a_60_kb_action_id_is_not_echoed_by_the_tool(make_server, token_all):
    result = run(_call, make_server(token_all.token), "get_action_status", {"action_id": LONG})
    assert result.is_error
    assert len(result.content[0].text) < 200
