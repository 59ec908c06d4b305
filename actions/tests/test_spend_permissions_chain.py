"""Spending permissions on the real chain stack (Hardhat/EDR node, Alto, the passkey account):
the grant signed once with the passkey, transfers signed by the session key with no prompt,
one over the allowance falling back to the passkey with the reason, a wrong recipient,
another agent, the period's rollover (chain time advanced), two spends racing the cap (the
contract takes what fits, nothing is spent twice) and the revocation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from actions.execution.models import Action, ActionStatus
from actions.execution.services import action_submit
from actions.permissions.follow import spend_permission_follow
from actions.permissions.models import SpendPermission, SpendPermissionStatus
from actions.permissions.revoking import spend_permissions_revoke
from actions.permissions.spending import permission_for_swap, remaining
from actions.tests.factories import passkey_signs, settle
from actions.tool_requests.checks import swap_request
from chain.dev import mint, token_balance
from core.formats import rfc3339
from core.lifecycle import Actor

from .conftest import usdc_id
from .test_swap import eure_id

pytestmark = [pytest.mark.chain, pytest.mark.django_db]
P = SpendPermissionStatus
MERCHANT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
OTHER = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"
USDC = 10**6


def _post(api_client, token, tool: str, payload: dict) -> dict:
    response = api_client.post(f"/api/v1/actions/{tool}", token, payload)
    assert response.status_code == 201, response.content
    return response.json()


def test_an_agent_spends_within_its_weekly_allowance_and_no_more(
    webauthn_settings, make_user_registered, api_client, application, make_application, make_token
):
    user, passkey, account, w3 = make_user_registered("spender")
    mint(w3, "USDC", account.address, 200 * USDC)
    token = make_token(user, application, scope="read:actions write:actions")
    grant = _post(
        api_client,
        token,
        "request_spend_permission",
        {
            "asset_id": usdc_id(),
            "amount": "50",
            "period": "weekly",
            "recipients": [MERCHANT],
            "expires_at": rfc3339(timezone.now() + timedelta(days=60)),
            "purpose": "weekly groceries",
        },
    )
    assert grant["type"] == "spendGrant" and grant["sign_url"]
    assert passkey_signs(passkey, user, grant["action_id"]).status == ActionStatus.EXECUTED
    permission = spend_permission_follow(SpendPermission.objects.get(user=user))
    assert permission.status == P.ACTIVE
    assert remaining(permission).units == 50 * USDC

    before = token_balance(w3, "USDC", MERCHANT)
    for amount in ("20", "20", "5"):
        answer = _post(
            api_client, token, "transfer", {"asset_id": usdc_id(), "amount": amount, "to": MERCHANT}
        )
        assert answer["sign_url"] is None and answer["status"] == "signed", answer
        assert answer["signed_by_permission"] == permission.name
        spent = settle(answer["action_id"])
        assert spent.status == ActionStatus.EXECUTED, spent.error
        assert spent.spend_permission_id == permission.pk
        assert spent.history.filter(
            detail=f"signed by permission {permission.name} for {application.name}"
        ).exists()
    assert token_balance(w3, "USDC", MERCHANT) - before == 45 * USDC

    over = _post(
        api_client, token, "transfer", {"asset_id": usdc_id(), "amount": "10", "to": MERCHANT}
    )
    assert over["sign_url"] and over["status"] == "proposed"
    assert over["permission_note"] == "over this week's remaining 5 USDC"
    # The same reason kept for the signing page, which says it in the user's language.
    assert Action.objects.get(pk=over["action_id"]).params["permission_reasons"] == [
        {
            "code": "over_allowance",
            "name": permission.name,
            "period": "weekly",
            "amount": "5",
            "symbol": "USDC",
        }
    ]
    assert (
        "over this week's remaining 5 USDC"
        in Action.objects.get(pk=over["action_id"]).history.first().detail
    )

    wrong = _post(
        api_client, token, "transfer", {"asset_id": usdc_id(), "amount": "1", "to": OTHER}
    )
    assert wrong["sign_url"] and "is not in the permission's recipients" in wrong["permission_note"]

    # Another agent of the same user: not its permission, so no prompt-free spend, no note.
    stranger = make_token(user, make_application("stranger"), scope="read:actions write:actions")
    theirs = _post(
        api_client, stranger, "transfer", {"asset_id": usdc_id(), "amount": "1", "to": MERCHANT}
    )
    assert theirs["sign_url"] and "permission_note" not in theirs
    seen = api_client.get("/api/v1/spend-permissions", stranger).json()
    assert seen == {"permissions": []}
    mine = api_client.get("/api/v1/spend-permissions", token).json()["permissions"]
    assert mine[0]["remaining"] == "5" and len(mine[0]["spends"]) == 3

    # A week of chain time later the allowance is whole again, exactly once.
    w3.provider.make_request("evm_increaseTime", [7 * 86400])
    w3.provider.make_request("evm_mine", [])
    assert remaining(permission).units == 50 * USDC

    # Two spends racing the cap: both are valid, signed ops; the contract takes what fits.
    racing = [
        _post(
            api_client, token, "transfer", {"asset_id": usdc_id(), "amount": "30", "to": MERCHANT}
        )
        for _ in range(2)
    ]
    assert all(r["sign_url"] is None for r in racing)
    before = token_balance(w3, "USDC", MERCHANT)
    for r in racing:
        action_submit(action_id=r["action_id"])
    ends = sorted(settle(r["action_id"]).status for r in racing)
    assert ends == [ActionStatus.EXECUTED, ActionStatus.FAILED]
    failed = Action.objects.get(
        pk=next(
            r["action_id"]
            for r in racing
            if Action.objects.get(pk=r["action_id"]).status == "failed"
        )
    )
    assert "allowance" in failed.error
    assert token_balance(w3, "USDC", MERCHANT) - before == 30 * USDC

    # The user revokes: the key is gone at once, then one passkey signature on chain.
    [revoke] = spend_permissions_revoke(
        user=user, permission_ids=[permission.pk], actor=Actor.end_user(user), why="test"
    )
    permission.refresh_from_db()
    assert permission.status == P.REVOKING and not permission.has_key
    after_key = _post(
        api_client, token, "transfer", {"asset_id": usdc_id(), "amount": "1", "to": MERCHANT}
    )
    assert after_key["sign_url"] and "being revoked" in after_key["permission_note"]
    assert passkey_signs(passkey, user, revoke.pk).status == ActionStatus.EXECUTED
    permission = spend_permission_follow(permission)
    assert permission.status == P.REVOKED


def test_a_swap_of_the_pair_a_permission_names_needs_no_prompt_and_others_fall_back(
    webauthn_settings, make_user_registered, quotes, api_client, client, application, make_token
):
    user, passkey, account, w3 = make_user_registered("swapper")
    mint(w3, "USDC", account.address, 100 * USDC)
    token = make_token(user, application, scope="read:actions write:actions")
    grant = _post(
        api_client,
        token,
        "request_spend_permission",
        {
            "asset_id": usdc_id(),
            "amount": "50",
            "period": "weekly",
            "to_asset_id": eure_id(),
            "expires_at": rfc3339(timezone.now() + timedelta(days=60)),
            "name": "into euros",
        },
    )
    assert grant["summary"].startswith(
        f"{application.name} may swap up to 50 USDC per week into EURe on Gnosis (local)"
    )
    client.force_login(user)
    page = client.get(f"/sign/{grant['action_id']}/").content.decode()
    assert f"{application.name} may swap up to 50 USDC per week into EURe until" in page
    assert 'id="permission-pair"' in page and 'id="permission-recipients"' not in page
    assert passkey_signs(passkey, user, grant["action_id"]).status == ActionStatus.EXECUTED
    permission = spend_permission_follow(SpendPermission.objects.get(user=user))
    assert permission.status == P.ACTIVE and permission.to_token.symbol == "EURe"

    def swap(amount: str, to_asset_id: str | None = None) -> dict:
        body = {"from_asset_id": usdc_id(), "to_asset_id": to_asset_id or eure_id()}
        return _post(api_client, token, "swap", {**body, "amount": amount})

    usdc_before = token_balance(w3, "USDC", account.address)
    eure_before = token_balance(w3, "EURe", account.address)
    answer = swap("30")
    assert answer["sign_url"] is None and answer["status"] == "signed", answer
    assert answer["signed_by_permission"] == "into euros"
    swapped = settle(answer["action_id"])
    assert swapped.status == ActionStatus.EXECUTED, swapped.error
    assert swapped.history.filter(
        detail=f"signed by permission into euros for {application.name}"
    ).exists()
    assert usdc_before - token_balance(w3, "USDC", account.address) == 30 * USDC
    assert token_balance(w3, "EURe", account.address) - eure_before == 276 * 10**17  # 27.6
    assert remaining(permission).units == 20 * USDC

    # Over what is left: the passkey, with the reason; a transfer is no part of the pair.
    over = swap("25")
    assert over["sign_url"] and over["permission_note"] == "over this week's remaining 20 USDC"
    page = client.get(f"/sign/{over['action_id']}/", HTTP_ACCEPT_LANGUAGE="es").content.decode()
    assert (
        "El permiso de gasto de tu agente no cubre esta solicitud, por eso necesita tu firma: "
        "supera los 20 USDC que quedan esta semana del permiso de gasto “into euros”."
    ) in page
    paid = _post(
        api_client, token, "transfer", {"asset_id": usdc_id(), "amount": "1", "to": MERCHANT}
    )
    assert paid["sign_url"] and "is not in the permission's recipients" in paid["permission_note"]
    # Cross-chain: never under a permission, and said so (before any quote is asked).
    bridged = swap_request(
        user=user,
        from_asset_id=usdc_id(),
        to_asset_id=eure_id().replace("eip155:31337", "eip155:31338"),
        amount="1",
    )
    found, why = permission_for_swap(user=user, application=application, request=bridged)
    assert found is None and [(r.code, r.text) for r in why] == [
        (
            "cross_chain",
            "a swap to another chain is never covered by a permission: the bridge's output "
            "cannot be checked on the source chain",
        )
    ]

    page = client.get("/permissions/").content.decode()
    assert "may swap up to 50 USDC per week into EURe" in page
    assert page.count('class="spend-swap"') == 1 and "swapped for at least 27.462 EURe" in page
    mine = api_client.get("/api/v1/spend-permissions", token).json()["permissions"]
    assert (mine[0]["to_symbol"], mine[0]["remaining"]) == ("EURe", "20")
    assert [(s["type"], s["amount"], s["to"]) for s in mine[0]["spends"]] == [
        ("swap", "30", eure_id())
    ]
