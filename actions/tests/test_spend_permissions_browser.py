"""A spending permission end to end in Chromium (virtual authenticator): the agent asks for 50
USDC a week to merchant.eth, the user reads it in plain words and signs once; three payments
go with no prompt, the fourth is over the allowance and asks the user, with the reason; the
user revokes it from their Spending permissions page with one more signature."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from actions.execution.models import Action
from actions.permissions.models import SpendPermission
from actions.tests.browser import browser_page, passkey_user  # noqa: F401
from chain import contracts, ens
from chain.dev import token_balance
from core.formats import rfc3339
from dev.testing import wait_until

pytestmark = [pytest.mark.chain, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_weekly_allowance_three_payments_a_fourth_asked_then_revoked(
    browser_page,  # noqa: F811 - the imported fixture
    live_server,
    application,
    make_token,
    api_client,
):
    page = browser_page
    user, account, w3 = passkey_user(page, live_server.url, "carol", usdc=100_000_000)
    merchant = w3.eth.account.from_key(ens.MERCHANT_KEY).address
    ens.register(w3, "merchant.eth", merchant)
    usdc = f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}"
    token = make_token(user, application, scope="read:actions write:actions")

    def call(tool: str, body: dict) -> dict:
        response = api_client.post(f"/api/v1/actions/{tool}", token, body)
        assert response.status_code == 201, response.content
        return response.json()

    def executed(action_id: str) -> dict:
        def done():
            body = api_client.get(f"/api/v1/actions/{action_id}", token).json()
            return body if body["status"] in ("executed", "failed") else None

        return wait_until(done, timeout=60, interval=0.5)

    grant = call(
        "request_spend_permission",
        {
            "asset_id": usdc,
            "amount": "50",
            "period": "weekly",
            "recipients": ["merchant.eth"],
            "expires_at": rfc3339(timezone.now() + timedelta(days=60)),
            "purpose": "weekly groceries",
        },
    )
    page.goto(grant["sign_url"])
    headline = " ".join(page.inner_text("#headline").split())
    assert f"may send up to 50 USDC per week to merchant.eth ({merchant}) until" in headline
    page.click("#approve")
    page.wait_for_selector('[data-status="executed"]', timeout=90_000)
    listed = api_client.get("/api/v1/spend-permissions", token).json()["permissions"]
    assert listed[0]["status"] == "active" and listed[0]["remaining"] == "50"

    before = token_balance(w3, "USDC", merchant)
    for amount in ("20", "20", "5"):
        paid = call("transfer", {"asset_id": usdc, "amount": amount, "to": "merchant.eth"})
        assert paid["sign_url"] is None, paid
        assert executed(paid["action_id"])["status"] == "executed"
    assert token_balance(w3, "USDC", merchant) - before == 45_000_000

    fourth = call("transfer", {"asset_id": usdc, "amount": "10", "to": "merchant.eth"})
    assert fourth["sign_url"] and fourth["permission_note"] == "over this week's remaining 5 USDC"

    permission = SpendPermission.objects.get(user=user)
    page.goto(f"{live_server.url}/permissions/")
    assert page.inner_text(f"#permission-{permission.pk} .remaining").startswith("5 USDC")
    page.click(f"#revoke-{permission.pk}")
    page.wait_for_selector("#approve")
    permission.refresh_from_db()
    assert permission.status == "revoking" and not permission.has_key  # gone before the chain
    page.click("#approve")
    page.wait_for_selector('[data-status="executed"]', timeout=90_000)
    page.goto(f"{live_server.url}/permissions/")
    assert page.get_attribute(f"#permission-{permission.pk}", "data-status") == "revoked"
    assert Action.objects.filter(spend_permission=permission, type="transfer").count() == 3
