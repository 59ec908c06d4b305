"""The chaos test's view of the cluster's own database (a private PostgreSQL the test process is
not connected to): run as `python -m picnic.tests.chaos_probe setup|check` with the cluster's
environment, it makes the agent and its tokens, or reports what the database says, as JSON.

    setup: the agent user, a workspace with an X account, a funded wallet, two bearer tokens
           (the API's audience and the MCP server's), and a proposed card action for the MCP
           agent to follow (`picnic://action/{id}`).
    touch: reads {"action_id": …, "summary": …} on stdin; changes the action's summary (a
           visible change: the sessions following it are notified).
    check: reads {"deliveries": [...], "operations": [...]} on stdin; prints each item's
           status and history ends, the billing invariants, the counts the metrics must match.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from datetime import timedelta
from decimal import Decimal

import django

X_TOKEN_ENV = "PICNIC_CHAOS_X_TOKEN"
API_SCOPES = "agent:dm_write agent:dm_read operations:read operations:write read:actions"


def setup() -> dict:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application

    from actions.execution.models import ActionType
    from actions.execution.services import action_create
    from messaging.models import Membership, Role, SocialAccount, Workspace
    from operations import billing

    user = get_user_model().objects.create_user(username="chaos-agent", password=None)
    workspace = Workspace.objects.create(name="Chaos")
    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
    account = SocialAccount.objects.create(
        workspace=workspace, provider="x", handle="chaos", credential_ref=f"env:{X_TOKEN_ENV}"
    )
    billing.wallet_grant(owner=user, amount=Decimal("1000000"), note="chaos")
    application = Application.objects.create(
        name="chaos",
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1:9999/callback",
    )

    def token(resource: str) -> str:
        return AccessToken.objects.create(
            user=user,
            application=application,
            token=secrets.token_urlsafe(32),
            scope=API_SCOPES,
            expires=timezone.now() + timedelta(hours=2),
            resource=[resource],
        ).token

    action = action_create(
        user=user,
        application=application,
        type=ActionType.CARD_FREEZE,
        summary="chaos: followed over MCP",
        chain_id=settings.CARD_CHAIN_ID,
        smart_account="0x" + "ab" * 20,
        params={"card_id": "chaos"},
    )
    return {
        "action_id": str(action.pk),
        "api_token": token(settings.PUBLIC_BASE_URL),
        "mcp_token": token(settings.MCP_RESOURCE_URL),
        "workspace_id": str(workspace.pk),
        "social_account_id": str(account.pk),
    }


def touch(change: dict) -> dict:
    from actions.execution.models import Action
    from core.lifecycle import touch

    changed = touch(
        lifecycle=Action.lifecycle, pk=change["action_id"], changes={"summary": change["summary"]}
    )
    return {"changed": changed}


def check(items: dict) -> dict:
    from messaging.models import Delivery
    from operations import billing
    from operations.models import Operation, Wallet

    def history(entity) -> list[str]:
        return list(entity.history.order_by("timestamp", "id").values_list("status", flat=True))

    deliveries = {
        str(d.pk): {"status": d.status, "history": history(d)}
        for d in Delivery.objects.filter(workspace__name="Chaos")
    }
    operations = {
        str(o.pk): {"state": o.state, "invariants": billing.invariants(o)}
        for o in Operation.objects.filter(owner__username="chaos-agent")
    }
    wallet = Wallet.objects.get(owner__username="chaos-agent")
    return {
        "deliveries": deliveries,
        "operations": operations,
        "wallet_invariants": billing.wallet_invariants(wallet),
        "asked": items,
    }


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")
    django.setup()
    command = sys.argv[1]
    commands = {"setup": setup, "touch": touch, "check": check}
    result = commands[command](json.load(sys.stdin)) if command != "setup" else setup()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
