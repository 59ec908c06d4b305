"""The tool contracts through the SDK's in-memory client: listing per profile, output schemas,
each tool's happy path and the seeds' error texts, scopes, another user's data."""

from __future__ import annotations

import json
import uuid

import jsonschema
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from actions.contract import ACTION_STATUS_SCHEMA
from core.api import schema_errors
from mcp_adapter.api import ApiAnswer
from mcp_adapter.tests.conftest import make_action as _action
from mcp_adapter.tests.conftest import run
from mcp_adapter.tools import TOOLS_BY_NAME
from messaging import contract

pytestmark = pytest.mark.django_db(transaction=True)

CORE = {
    "get_balances",
    "get_transactions",
    "get_profile",
    "get_card",
    "get_smart_accounts",
    "get_action_status",
    "transfer",
    "swap",
    "card_freeze",
    "card_unfreeze",
    "card_limit",
    "request_spend_permission",
    "get_spend_permissions",
}
FULL = CORE | {
    "sosoapi_dm_actions_status",
    "sosoapi_dm_actions_send",
    "tong_operation_status",
    "tong_operation_quote",
    "tong_operation_start",
    "tong_operation_cancel",
    "tong_operation_result",
}


async def _tools(server):
    async with Client(server) as client:
        return {t.name: t for t in (await client.list_tools()).tools}


def test_it_lists_tools_per_profile_with_and_without_output_schemas(make_server):
    core = run(_tools, make_server(None, profile="core"))
    full = run(_tools, make_server(None, profile="full", output_schemas=True))
    assert set(core) == CORE and set(full) == FULL
    assert all(t.output_schema is None for t in core.values())
    assert full["sosoapi_dm_actions_status"].output_schema == contract.STATUS_OUTPUT_SCHEMA
    assert full["sosoapi_dm_actions_status"].input_schema == contract.STATUS_INPUT_SCHEMA
    assert full["get_action_status"].output_schema == ACTION_STATUS_SCHEMA
    dm = full["sosoapi_dm_actions_status"].annotations
    assert (dm.read_only_hint, dm.destructive_hint, dm.idempotent_hint, dm.open_world_hint) == (
        True,
        False,
        True,
        False,
    )
    assert full["get_action_status"].annotations.read_only_hint is False  # it may reconcile


def test_every_tool_has_a_title_clients_show_instead_of_its_name(make_server):
    """MCP 2025-11-25 Tool.title (and annotations.title, where 2025-03-26 clients read it): a
    short human name, unique, never the raw tool name."""
    full = run(_tools, make_server(None, profile="full"))
    assert len(full) == 20
    titles = {name: tool.title for name, tool in full.items()}
    assert all(titles.values()), titles
    assert len(set(titles.values())) == len(titles)
    assert all(title != name and "_" not in title for name, title in titles.items())
    assert all(tool.annotations.title == tool.title for tool in full.values())
    assert titles["get_action_status"] == "Action status"
    assert titles["transfer"] == "Send tokens"


def test_the_output_schema_switch_follows_the_environment(make_server, monkeypatch):
    monkeypatch.setenv("SOSOAPI_OUTPUT_SCHEMAS", "1")
    assert run(_tools, make_server(None))["tong_operation_status"].output_schema is not None
    monkeypatch.setenv("SOSOAPI_OUTPUT_SCHEMAS", "0")
    assert run(_tools, make_server(None))["tong_operation_status"].output_schema is None


async def _call(server, name, arguments):
    async with Client(server) as client:
        return await client.call_tool(name, arguments)


def test_get_action_status_returns_the_seeds_fields_structured_and_as_text(
    make_server, user, application, make_token
):
    action = _action(user, application)
    token = make_token(user, application, scope="read:actions")
    result = run(
        _call, make_server(token.token), "get_action_status", {"action_id": str(action.pk)}
    )
    assert result.is_error is False
    jsonschema.validate(result.structured_content, ACTION_STATUS_SCHEMA)
    assert result.structured_content["status"] == "proposed"
    assert json.loads(result.content[0].text) == result.structured_content


def test_business_errors_are_error_results_with_the_seeds_texts(
    make_server, user, other_user, application, make_application, make_token
):
    mine = make_token(user, application, scope="read:actions")
    missing = str(uuid.uuid4())
    result = run(_call, make_server(mine.token), "get_action_status", {"action_id": missing})
    assert result.is_error and result.content[0].text == f"Action not found: {missing}"

    theirs = _action(other_user, application)
    result = run(_call, make_server(mine.token), "get_action_status", {"action_id": str(theirs.pk)})
    assert result.is_error
    assert result.content[0].text == "Action does not belong to the authenticated user"

    other_client = _action(user, make_application("another-agent"))
    result = run(
        _call, make_server(mine.token), "get_action_status", {"action_id": str(other_client.pk)}
    )
    assert result.content[0].text == "Action belongs to a different OAuth client"


def test_a_token_without_the_tools_scope_gets_the_scope_error(
    make_server, user, application, make_token
):
    action = _action(user, application)
    token = make_token(user, application, scope="write:actions")
    result = run(
        _call, make_server(token.token), "get_action_status", {"action_id": str(action.pk)}
    )
    assert result.is_error
    assert result.content[0].text == "Insufficient scope: this call requires the scope read:actions"


def test_input_is_validated_against_the_tools_schema(make_server, user, application, make_token):
    token = make_token(user, application, scope="agent:dm_read")
    result = run(
        _call,
        make_server(token.token),
        "sosoapi_dm_actions_status",
        {"workspace_id": "not-a-uuid", "social_account_id": str(uuid.uuid4()), "extra": 1},
    )
    assert result.is_error and result.content[0].text.startswith("Invalid input")
    assert "is not a 'uuid'" in result.content[0].text and "extra" in result.content[0].text


def test_unknown_tools_are_protocol_errors(make_server):
    from mcp.shared.exceptions import MCPError

    async def call_unknown():
        async with Client(make_server(None)) as client:
            try:
                await client.call_tool("nope", {})
            except MCPError as exc:
                return exc

    error = run(call_unknown)
    assert isinstance(error, MCPError) and "Unknown tool: nope" in str(error)


def test_a_refused_input_reaches_the_agent_with_its_field_errors(
    make_server, user, application, make_token
):
    # The schema takes any cursor string; the API refuses this one field by name.
    token = make_token(user, application, scope="read:transactions")
    result = run(_call, make_server(token.token), "get_transactions", {"cursor": "garbage!"})
    assert result.is_error
    text = result.content[0].text
    assert text.startswith("Invalid input: cursor: ") and "answered" not in text


def test_the_agent_reads_the_detail_then_each_fields_messages():
    refused = ApiAnswer(
        400,
        {
            "detail": "Invalid input",
            "code": "invalid_input",
            "errors": {"(body)": ["one of action_id or idempotency_key is required"]},
        },
    )
    assert (
        refused.message == "Invalid input: (body): one of action_id or idempotency_key is required"
    )
    missing = ApiAnswer(404, {"detail": "Action not found: x", "code": "not_found", "errors": {}})
    assert missing.message == "Action not found: x"
    assert ApiAnswer(502, "<html>Bad Gateway</html>").message == "the API answered 502"


def test_get_transactions_goes_through_the_api_and_pages(
    make_server, user, application, make_token
):
    from actions.history.models import HistoryEntry

    for minute in range(3):
        HistoryEntry.objects.create(
            user=user,
            occurred_at=f"2026-12-01T10:0{minute}:00Z",
            kind="cardFreeze",
        )
    token = make_token(user, application, scope="read:transactions")
    server = make_server(token.token)
    first = run(_call, server, "get_transactions", {"limit": 2})
    assert first.is_error is False, first.content
    schema = TOOLS_BY_NAME["get_transactions"].output_schema
    jsonschema.validate(first.structured_content, schema)
    assert len(first.structured_content["transactions"]) == 2
    cursor = first.structured_content["nextCursor"]
    rest = run(_call, server, "get_transactions", {"cursor": cursor}).structured_content
    assert [t["timestamp"] for t in rest["transactions"]] == ["2026-12-01T10:00:00Z"]
    assert rest["nextCursor"] is None and rest["sync"] is None


def test_get_profile_goes_through_the_api(make_server, user, application, make_token):
    token = make_token(user, application, scope="read:profile")
    result = run(_call, make_server(token.token), "get_profile", {})
    assert result.is_error is False
    jsonschema.validate(result.structured_content, TOOLS_BY_NAME["get_profile"].output_schema)
    assert result.structured_content["userId"] == str(user.pk)
    assert result.structured_content["ramps"]["EUR"]["kyc"]["status"] == "none"


def test_get_smart_accounts_goes_through_the_api(make_server, user, application, make_token):
    from actions.accounts.models import SmartAccount

    # No passkey behind it: not passkey-controlled, so not listed.
    SmartAccount.objects.create(
        user=user, kind="picnic", chain_id=31337, address="0x" + "12" * 20, owner="passkey:x"
    )
    token = make_token(user, application, scope="read:accounts")
    result = run(_call, make_server(token.token), "get_smart_accounts", {})
    assert result.is_error is False
    schema = TOOLS_BY_NAME["get_smart_accounts"].output_schema
    jsonschema.validate(result.structured_content, schema)
    assert result.structured_content == {"smartAccounts": []}


def test_action_tools_propose_through_the_api(make_server, user, application, make_token):
    token = make_token(user, application, scope="read:actions write:actions")
    # No card: the tool's own error, straight from the API.
    result = run(_call, make_server(token.token), "card_freeze", {})
    assert result.is_error and result.content[0].text == "No Picnic card for this user"
    result = run(_call, make_server(token.token), "card_limit", {"daily_limit": "-3"})
    assert result.is_error and "daily_limit" in result.content[0].text


def test_dm_status_and_send_tools(
    make_server, user, application, make_token, workspace, social_account
):
    from messaging.models import Membership, Role

    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
    token = make_token(user, application, scope="agent:dm_read agent:dm_write")
    key = str(uuid.uuid4())
    args = {
        "workspace_id": str(workspace.pk),
        "social_account_id": str(social_account.pk),
        "recipient_id": "12345",
        "text": "hello",
        "idempotency_key": key,
    }
    sent = run(_call, make_server(token.token), "sosoapi_dm_actions_send", args)
    assert sent.is_error is False, sent.content
    status = run(
        _call,
        make_server(token.token),
        "sosoapi_dm_actions_status",
        {
            "workspace_id": str(workspace.pk),
            "social_account_id": str(social_account.pk),
            "idempotency_key": key,
        },
    )
    assert status.is_error is False
    assert schema_errors(contract.STATUS_OUTPUT_SCHEMA, status.structured_content) == {}
    assert status.structured_content["action"]["id"] == sent.structured_content["action"]["id"]


def test_tong_operation_status(make_server, user, application, make_token):
    from decimal import Decimal

    from operations import billing
    from operations.contract import OPERATION_STATUS_SCHEMA
    from operations.services import operation_submit

    billing.wallet_grant(owner=user, amount=Decimal("10"), note="test grant")
    # category:sensitive waits for review: a real operation, no backend needed.
    operation = operation_submit(
        owner=user,
        application=application,
        tool="text-gen",
        category="sensitive",
        input_text="hello",
    )
    token = make_token(user, application, scope="operations:read")
    result = run(
        _call,
        make_server(token.token),
        "tong_operation_status",
        {"operation_id": str(operation.pk)},
    )
    assert result.is_error is False, result.content
    jsonschema.validate(result.structured_content, OPERATION_STATUS_SCHEMA)
    assert result.structured_content["state"] == "needs_review"
    missing = str(uuid.uuid4())
    result = run(
        _call, make_server(token.token), "tong_operation_status", {"operation_id": missing}
    )
    assert result.is_error


def test_there_are_no_prompts_and_an_unknown_one_is_a_protocol_error(make_server):
    """No prompts: no prompts capability and prompts/get is an unknown method. Where prompts
    exist (the conformance fixtures), an unknown name is invalid params, not code 0."""
    from mcp_adapter.tests.conformance_server import ConformanceMCP

    async def get(server):
        async with Client(server, mode="legacy") as client:
            capabilities = client.server_capabilities
            try:
                await client.get_prompt("nope")
            except MCPError as exc:
                return capabilities, exc

    capabilities, error = run(get, make_server(None))
    assert capabilities.prompts is None and error.error.code == types.METHOD_NOT_FOUND
    capabilities, error = run(get, ConformanceMCP())
    assert capabilities.prompts is not None
    assert (
        error.error.code == types.INVALID_PARAMS and error.error.message == "Unknown prompt: nope"
    )
