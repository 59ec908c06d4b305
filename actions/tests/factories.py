from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.utils import timezone
from eth_utils import to_checksum_address

from actions.accounts.models import Passkey, SmartAccount, Token
from actions.card.models import Card
from actions.execution.models import Action, ActionStatus, ActionType
from actions.execution.services import action_create, action_reconcile, action_submit
from actions.execution.signing import action_sign
from actions.permissions import session_keys
from actions.permissions.models import (
    SPEND_PERMISSION_LIFECYCLE,
    SpendPermission,
    SpendPermissionStatus,
)
from chain import contracts
from chain.stack import free_port
from core.chains import with_endpoints
from core.lifecycle import Actor, create
from dev.testing import wait_until
from evm import spend_permission as chain_permission

SENDER = "0x1234567890123456789012345678901234567890"


def user_op(**overrides: Any) -> dict[str, Any]:
    return {
        "sender": SENDER,
        "nonce": 0,
        "callData": "0x",
        "callGasLimit": 100_000,
        "verificationGasLimit": 200_000,
        "preVerificationGas": 50_000,
        "maxFeePerGas": 2_000_000_000,
        "maxPriorityFeePerGas": 1_000_000_000,
        "signature": "0x",
        **overrides,
    }


def make_action(*, user, application, ttl_seconds: int | None = None, **overrides: Any) -> Action:
    kwargs: dict[str, Any] = {
        "type": ActionType.TRANSFER,
        "summary": "Send 1.5 USDC to 0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "chain_id": 31337,
        "smart_account": SENDER,
        "params": {"amount": "1.5", "asset_id": "eip155:31337/erc20:0x0", "to": "0x7099"},
        "user_op": user_op(),
    }
    kwargs.update(overrides)
    return action_create(user=user, application=application, ttl_seconds=ttl_seconds, **kwargs)


def said(response) -> str:
    """An API error answer as an agent reads it: the detail, then each field's messages."""
    from core.api import error_text

    body = response.json()
    return error_text(body["detail"], body["errors"])


def demo_asset_id(chain_id: int, symbol: str) -> str:
    """The CAIP-19 id of a demo token on a local chain."""
    return f"eip155:{chain_id}/erc20:{contracts.demo_token_address(symbol)}"


def make_swap_action(*, user, application, provider: str = "local", **overrides: Any) -> Action:
    """A proposed swap of 2 USDC for EURe (quoted 1.84, at least 1.81, slippage 1.5 %) on the
    card's chain."""
    params = {
        "from_asset_id": demo_asset_id(31337, "USDC"),
        "to_asset_id": demo_asset_id(31337, "EURe"),
        "amount": "2",
        "symbol": "USDC",
        "to_symbol": "EURe",
        "to_amount": "1.84",
        "to_amount_min": "1.81",
        "slippage": "1.5",
        "provider": provider,
    }
    return make_action(user=user, application=application, type="swap", params=params, **overrides)


def make_card_freeze(*, user, application, **overrides: Any) -> Action:
    """A proposed card freeze: a real row with history and no user operation, no chain needed."""
    kwargs: dict[str, Any] = {
        "type": ActionType.CARD_FREEZE,
        "summary": "Freeze card",
        "chain_id": 31337,
        "smart_account": "0x" + "ab" * 20,
        "params": {},
    }
    kwargs.update(overrides)
    return action_create(user=user, application=application, **kwargs)


def make_chain_unreachable(settings) -> None:
    """The card chain's bundler and RPC at a closed port: the refresh a page's poll does runs
    for real and learns nothing, so what the page shows is what the test stores."""
    closed = f"http://127.0.0.1:{free_port()}"
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url=closed)
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, rpc_url=closed)
    settings.BUNDLER_TIMEOUT_SECONDS = 0.5


def made_up_address(symbol: str) -> str:
    return to_checksum_address("0x" + symbol.encode().hex().rjust(40, "0"))


def make_offline_wallet(user, monkeypatch) -> SmartAccount:
    """A passkey, its Picnic account and a card for `user`, with the demo tokens at made-up
    addresses: the real (CREATE2) ones need the compiled contracts, and the callers never reach
    a contract, so they run without node (test-fast)."""
    from dev.demo.actions import ensure_demo_tokens

    monkeypatch.setattr(contracts, "demo_token_address", made_up_address)
    monkeypatch.setattr(contracts, "demo_vault_address", made_up_address)
    ensure_demo_tokens()
    passkey = Passkey.objects.create(
        user=user,
        credential_id="cred-1",
        public_key=b"\x00",
        public_key_x="0x" + "11" * 32,
        public_key_y="0x" + "22" * 32,
        owner_index=0,  # the account's first owner, as registration makes it
    )
    account = SmartAccount.objects.create(
        user=user,
        kind="picnic",
        chain_id=31337,
        address="0x" + "ab" * 20,
        owner="passkey:cred-1",
        passkey=passkey,
        entry_point_version="0.7",
    )
    Card.objects.create(
        user=user,
        card_id="card-1",
        last4="4242",
        safe_address="0x" + "cd" * 20,
        chain_id=31337,
        delay_address="0x" + "01" * 20,
        roles_address="0x" + "02" * 20,
    )
    return account


MERCHANT = "0x" + "5a" * 20


def make_permission(
    *, user, application, account, status=SpendPermissionStatus.ACTIVE, **values
) -> SpendPermission:
    """A permission row as a granted one looks (its grant action executed)."""
    address, key = chain_permission.new_session_key()
    grant = make_action(
        user=user,
        application=application,
        type=ActionType.SPEND_GRANT,
        summary="grant",
        smart_account=account.address,
    )
    fields = {
        "user": user,
        "account": account,
        "chain_id": 31337,
        "token": Token.objects.get(symbol="USDC", chain_id=31337),
        "application": application,
        "name": "groceries",
        "allowance_units": "50000000",
        "allowance": "50",
        "period": "weekly",
        "recipients": [{"address": MERCHANT, "name": "merchant.eth"}],
        "starts_at": timezone.now() - timedelta(hours=1),
        "expires_at": timezone.now() + timedelta(days=30),
        "permission_id": "0x" + chain_permission.permission_id().hex(),
        "session_key_address": address,
        "session_key_encrypted": session_keys.seal(key),
        "grant_action": grant,
        "status": status,
        **values,
    }
    permission = create(
        lifecycle=SPEND_PERMISSION_LIFECYCLE, actor=Actor.agent(), values=fields, detail="asked"
    )
    Action.objects.filter(pk=grant.pk).update(spend_permission=permission)
    return permission


def settle(action_id) -> Action:
    """Submit a signed action (the on-commit task does not run in a test transaction) and
    reconcile it with the real bundler until it is no longer in flight."""
    action = Action.objects.get(pk=action_id)
    if action.status == ActionStatus.SIGNED:
        action_submit(action_id=action.pk)

    def settled():
        action_reconcile(action_id=action.pk, actor=Actor.worker())
        current = Action.objects.get(pk=action.pk)
        return current if current.status not in ("submitted", "broadcast") else None

    return wait_until(settled, timeout=60, interval=0.3)


def passkey_signs(passkey, user, action_id) -> Action:
    """The user signs the action with their (software) passkey; then `settle`."""
    action = Action.objects.get(pk=action_id)
    assertion = json.dumps(passkey.get_json(bytes.fromhex(action.user_op_hash[2:])))
    action_sign(action_id=action.pk, user=user, credential_json=assertion)
    return settle(action.pk)
