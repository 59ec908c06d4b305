"""The MCP server's JSON-RPC surface fuzzed over streamable HTTP, as picnic/tests/test_fuzz.py
fuzzes the API: every tool gets generated arguments from the input schema it publishes
(`tools/list`), turned into requests by schemathesis (each schema wrapped as an OpenAPI
operation's body), plus a table of malformed JSON-RPC envelopes. Every answer is a 2xx or a
4xx carrying JSON-RPC (a result, or an error with the request's id), never a 5xx, and the
server still answers afterwards. Bounded: a few derandomized examples per tool, every outside
service on a closed port with a 0.5 s timeout."""

from __future__ import annotations

import dataclasses
import json

import pytest
import requests
import schemathesis
from django.conf import settings as django_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings

from actions.tests.factories import make_offline_wallet
from mcp_adapter.tests.test_transports import HEADERS, INIT
from messaging.tests.factories import TOKEN_ENV, X_TOKEN, make_social_account

pytestmark = pytest.mark.django_db(transaction=True)

CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port
EXAMPLES = 3  # per tool


class Session:
    """One initialized MCP session over HTTP: raw JSON-RPC posts."""

    def __init__(self, url: str, token: str):
        self.url = url
        self.headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        answer = requests.post(url, json=INIT, headers=self.headers, timeout=10)
        assert answer.status_code == 200, answer.text
        self.headers["Mcp-Session-Id"] = answer.headers["Mcp-Session-Id"]
        self.headers["MCP-Protocol-Version"] = INIT["params"]["protocolVersion"]
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.next_id = 100

    def post(self, body, *, raw: bytes | None = None) -> requests.Response:
        data = raw if raw is not None else json.dumps(body).encode()
        return requests.post(self.url, data=data, headers=self.headers, timeout=30)

    def call(self, method: str, params) -> tuple[requests.Response, dict | None]:
        self.next_id += 1
        answer = self.post(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        )
        return answer, messages(answer)

    def tools(self) -> list[dict]:
        _, message = self.call("tools/list", {})
        return message["result"]["tools"]


def messages(answer: requests.Response) -> dict | None:
    """The JSON-RPC message of an answer (a JSON body, or the last `data:` of an SSE body)."""
    kind = answer.headers.get("Content-Type", "")
    if kind.startswith("text/event-stream"):
        lines = answer.text.split("\n")  # not splitlines(): U+2028 may be in a value
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        data = [d for d in data if d]
        return json.loads(data[-1]) if data else None
    if kind.startswith("application/json") and answer.content:
        return answer.json()
    return None


def _answered(answer: requests.Response, message: dict | None, request_id=None) -> str | None:
    """What is wrong with an answer, or None."""
    if answer.status_code >= 500:
        return f"{answer.status_code}: {answer.text[:300]}"
    if answer.status_code in (200, 400, 404, 406, 415, 422) and message is not None:
        if message.get("jsonrpc") != "2.0" or ("result" in message) == ("error" in message):
            return f"not one JSON-RPC result or error: {str(message)[:300]}"
        if request_id is not None and message.get("id") != request_id:
            return f"answered id {message.get('id')!r}, asked {request_id!r}"
    return None


@pytest.fixture
def session(http_server, user, application, make_token, monkeypatch, settings):
    for name in ("CHAIN_RPC_URL", "BUNDLER_RPC_URL", "SWAP_QUOTE_URL", "GNOSIS_PAY_URL",
                 "PRICE_API_URL", "MONERIUM_URL", "AVENIA_URL", "X_API_BASE_URL",
                 "OPERATIONS_BACKEND_URL"):  # fmt: skip
        setattr(settings, name, CLOSED)
    settings.CHAINS = tuple(
        dataclasses.replace(row, rpc_url=CLOSED, bundler_url=CLOSED) for row in settings.CHAINS
    )
    for name in ("CHAIN_READ_TIMEOUT_SECONDS", "BUNDLER_TIMEOUT_SECONDS",
                 "SWAP_QUOTE_TIMEOUT_SECONDS", "GNOSIS_PAY_TIMEOUT_SECONDS",
                 "PRICE_API_TIMEOUT_SECONDS", "RAMP_TIMEOUT_SECONDS",
                 "DM_PROVIDER_TIMEOUT_SECONDS", "OPERATIONS_BACKEND_TIMEOUT_SECONDS"):  # fmt: skip
        setattr(settings, name, 0.5)
    # Someone to act for: a Picnic account, a card, an agent seat with a social account.
    make_offline_wallet(user, monkeypatch)
    monkeypatch.setenv(TOKEN_ENV, X_TOKEN)
    make_social_account(member=user)
    token = make_token(user, application, scope=" ".join(django_settings.OAUTH2_SCOPES))
    with http_server() as http:
        yield Session(http.url, token.token)


def _as_openapi(tools: list[dict]) -> dict:
    """Each tool's published input schema as the JSON body of one POST operation."""
    paths = {
        f"/{tool['name']}": {
            "post": {
                "operationId": tool["name"],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": tool["inputSchema"]}},
                },
                "responses": {"200": {"description": "the tool's result"}},
            }
        }
        for tool in tools
    }
    return {"openapi": "3.1.0", "info": {"title": "tools", "version": "1"}, "paths": paths}


def test_every_tool_takes_generated_arguments_without_a_server_error(session):
    tools = session.tools()
    assert len(tools) >= 10  # every profile's tools
    schema = schemathesis.openapi.from_dict(_as_openapi(tools))
    wrong: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        _fuzz(session, operation.definition.raw["operationId"], operation, wrong)()
    assert not wrong, "\n".join(wrong)
    assert len(session.tools()) == len(tools)  # still serving


def _fuzz(session: Session, name: str, operation, wrong: list[str]):
    """EXAMPLES generated argument objects for tool `name`, each one tools/call."""

    @hypothesis_settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def call(case):
        arguments = case.body if isinstance(case.body, dict) else {}
        answer, message = session.call("tools/call", {"name": name, "arguments": arguments})
        problem = _answered(answer, message, session.next_id)
        if problem:
            wrong.append(f"{name} {json.dumps(arguments)[:200]}: {problem}")

    return call


BIG = "a" * 100_000
ENVELOPES = [
    b"",
    b"not json",
    b"{",
    b"[]",
    b"{}",
    b"null",
    b"42",
    b'"text"',
    b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": 7}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "nope"}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
    b' "params": {"name": "get_action_status", "arguments": []}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
    b' "params": {"name": "get_action_status", "arguments": {"action_id": "\\u0000"}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
    b' "params": {"name": "get_action_status", "arguments": {"action_id": "\\ud800"}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
    b' "params": {"name": "get_transactions", "arguments": {"limit": 1e400}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": 5}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "picnic://x/../y"}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": {}}}',
    b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": '
    + b"[" * 200
    + b"]" * 200
    + b"}}",
    ('{"jsonrpc": "2.0", "id": "' + BIG + '", "method": "ping"}').encode(),
    ('{"jsonrpc": "2.0", "id": 1, "method": "' + BIG + '"}').encode(),
    b"\xff\xfe{}",
]


def test_malformed_envelopes_get_a_json_rpc_error_never_a_server_error(session):
    wrong = []
    for raw in ENVELOPES:
        answer = session.post(None, raw=raw)
        problem = _answered(answer, _maybe(answer))
        if problem:
            wrong.append(f"{raw[:80]!r}: {problem}")
    assert not wrong, "\n".join(wrong)
    answer, message = session.call("ping", {})
    assert answer.status_code == 200 and message["result"] == {}  # still serving


def _maybe(answer: requests.Response) -> dict | None:
    try:
        message = messages(answer)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None
