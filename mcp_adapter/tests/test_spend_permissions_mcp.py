"""The spending-permission tools through the official MCP SDK's in-memory client: a malformed
request answered as a tool error with the reason (nothing stored), and get_spend_permissions
showing the calling agent its own permissions only."""

from __future__ import annotations

from datetime import timedelta

import jsonschema
import pytest
from django.utils import timezone
from mcp import Client

from actions.contract import ACTION_STATUS_SCHEMA
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.permissions.models import SpendPermission
from actions.tests.factories import (
    made_up_address,
    make_action,
    make_offline_wallet,
    make_permission,
)
from core.formats import rfc3339
from core.lifecycle import Actor, transition
from mcp_adapter.tests.conftest import run

pytestmark = pytest.mark.django_db(transaction=True)
USDC = f"eip155:31337/erc20:{made_up_address('USDC')}"


async def _call(server, name, arguments):
    async with Client(server) as client:
        return await client.call_tool(name, arguments)


def test_a_request_without_recipients_is_refused_with_the_reason(
    make_server, user, application, make_token, monkeypatch
):
    make_offline_wallet(user, monkeypatch)
    token = make_token(user, application, scope="read:actions write:actions")
    result = run(
        _call,
        make_server(token.token),
        "request_spend_permission",
        {
            "asset_id": USDC,
            "amount": "50",
            "period": "weekly",
            "expires_at": rfc3339(timezone.now() + timedelta(days=30)),
        },
    )
    assert result.is_error and "recipients is empty" in result.content[0].text
    assert not SpendPermission.objects.exists() and not Action.objects.exists()


def test_an_agent_sees_its_own_permissions_only(
    make_server, user, application, make_application, make_token, monkeypatch
):
    account = make_offline_wallet(user, monkeypatch)
    make_permission(user=user, application=application, account=account, status="requested")
    other = make_application("other-agent")
    mine = run(
        _call,
        make_server(make_token(user, application).token),
        "get_spend_permissions",
        {},
    )
    theirs = run(_call, make_server(make_token(user, other).token), "get_spend_permissions", {})
    assert not mine.is_error and not theirs.is_error
    assert [p["name"] for p in mine.structured_content["permissions"]] == ["groceries"]
    assert theirs.structured_content == {"permissions": []}


def test_get_action_status_names_the_permission_that_signed_it(
    make_server, user, application, make_token, monkeypatch
):
    """The same status shape as the REST answer (one schema, one serializer): the permission
    whose session key signed it, or null for what the user signed with the passkey."""
    account = make_offline_wallet(user, monkeypatch)
    permission = make_permission(user=user, application=application, account=account, name="coffee")
    spent = make_action(user=user, application=application, smart_account=account.address)
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=spent.pk,
        to=ActionStatus.SIGNED,
        actor=Actor.system(),
        updates={"spend_permission": permission},
    )
    by_passkey = make_action(user=user, application=application)
    token = make_token(user, application, scope="read:actions")
    server = make_server(token.token, output_schemas=True)
    answers = {}
    for action in (spent, by_passkey, Action.objects.get(pk=permission.grant_action_id)):
        result = run(_call, server, "get_action_status", {"action_id": str(action.pk)})
        assert not result.is_error, result.content
        jsonschema.validate(result.structured_content, ACTION_STATUS_SCHEMA)
        body = result.structured_content
        answers[body["type"], body["status"]] = (
            body["signed_by_permission"],
            body["signed_by_permission_id"],
        )
    assert answers == {
        ("transfer", "signed"): ("coffee", str(permission.pk)),
        ("transfer", "proposed"): (None, None),
        ("spendGrant", "proposed"): (None, None),  # linked to it, but the passkey signs it
    }
