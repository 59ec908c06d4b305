"""The spending-permission tools through the official MCP SDK's in-memory client: a malformed
request answered as a tool error with the reason (nothing stored), and get_spend_permissions
showing the calling agent its own permissions only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from mcp import Client

from actions.models import Action, SpendPermission
from actions.tests.factories import made_up_address, make_offline_wallet, make_permission
from core.formats import rfc3339
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
