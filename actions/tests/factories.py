from __future__ import annotations

from typing import Any

from actions.models import Action, ActionType
from actions.services.lifecycle import action_create

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
    from picnic.api import error_text

    body = response.json()
    return error_text(body["detail"], body["errors"])
