"""Spending permissions of the passkey account (stand-in until the contract side lands: the
same names and arguments; replaced whole by the contract branch's module on merge)."""

from __future__ import annotations

import secrets

from eth_abi import decode, encode
from eth_account import Account
from eth_account.messages import encode_defunct
from web3 import Web3

PERIODS = {"daily": 86400, "weekly": 604800, "monthly": 2592000}
UINT160_MAX = 2**160 - 1
OVER_ALLOWANCE = "PasskeyAccount: over the period's allowance"


def _selector(signature: str) -> bytes:
    return Web3.keccak(text=signature)[:4]


def new_session_key() -> tuple[str, bytes]:
    account = Account.create()
    return account.address, bytes(account.key)


def permission_id() -> bytes:
    return secrets.token_bytes(32)


def grant_call(
    *,
    permission_id: bytes,
    session_key: str,
    token: str,
    allowance: int,
    period: int,
    start: int,
    end: int,
    recipients: list[str],
    any_recipient: bool,
) -> bytes:
    types = [
        "bytes32",
        "address",
        "address",
        "uint160",
        "uint48",
        "uint48",
        "uint48",
        "address[]",
        "bool",
    ]
    return _selector(f"grantPermission({','.join(types)})") + encode(
        types,
        [
            permission_id,
            Web3.to_checksum_address(session_key),
            Web3.to_checksum_address(token),
            allowance,
            period,
            start,
            end,
            [Web3.to_checksum_address(r) for r in recipients],
            any_recipient,
        ],
    )


def revoke_call(*, permission_id: bytes) -> bytes:
    return _selector("revokePermission(bytes32)") + encode(["bytes32"], [permission_id])


def spend_call_data(*, permission_id: bytes, to: str, amount: int) -> bytes:
    return _selector("executePermitted(bytes32,address,uint256)") + encode(
        ["bytes32", "address", "uint256"], [permission_id, Web3.to_checksum_address(to), amount]
    )


def sign_with_session_key(user_op_hash: bytes, private_key: bytes) -> bytes:
    signed = Account.sign_message(encode_defunct(primitive=user_op_hash), private_key)
    return bytes(signed.signature)


def spendable(w3: Web3, account: str, permission_id: bytes) -> tuple[int, int]:
    data = _selector("spendable(bytes32)") + encode(["bytes32"], [permission_id])
    raw = w3.eth.call({"to": Web3.to_checksum_address(account), "data": data})
    remaining, ends_at = decode(["uint256", "uint256"], raw)
    return remaining, ends_at
