"""Spend permissions of the passkey account (stand-in with the contract branch's names and
arguments until it lands; replaced whole by its module on merge)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from eth_abi import decode, encode
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import keccak, to_checksum_address
from web3 import Web3

from evm.account import DUMMY_SIGNATURE, Erc4337Account
from evm.bundler import BundlerClient

PERIODS = {"daily": 86_400, "weekly": 604_800, "monthly": 2_592_000}
PERMISSION_SIGNATURE = 2**256 - 1
OVER_ALLOWANCE = "PasskeyAccount: over the period's allowance"
PERMISSION_VERIFICATION_GAS = 10_000
_TYPES = ["uint256", "bytes32", "bytes"]


class InvalidGrant(ValueError):
    pass


@dataclass(frozen=True)
class Spendable:
    remaining: int
    period_ends_at: int


def _sel(signature: str) -> bytes:
    return keccak(text=signature)[:4]


def _id(value: bytes | str) -> bytes:
    return bytes.fromhex(value[2:]) if isinstance(value, str) else bytes(value)


def new_session_key() -> tuple[str, bytes]:
    key = secrets.token_bytes(32)
    return Account.from_key(key).address, key


def permission_id() -> bytes:
    return secrets.token_bytes(32)


def grant_data(
    *,
    permission_id,
    session_key,
    token,
    allowance,
    period_seconds,
    start,
    end,
    recipients=(),
    any_recipient=False,
) -> bytes:
    types = ["bytes32", "address", "address", "uint160", "uint48", "uint48", "uint48"]
    types += ["address[]", "bool"]
    values = [_id(permission_id), session_key, token, allowance, period_seconds, start, end]
    values += [[to_checksum_address(r) for r in recipients], bool(any_recipient)]
    return _sel(f"grantPermission({','.join(types)})") + encode(types, values)


def revoke_data(*, permission_id) -> bytes:
    return _sel("revokePermission(bytes32)") + encode(["bytes32"], [_id(permission_id)])


def grant_call(account, **grant: Any) -> str:
    return account.execute(account.address, 0, grant_data(**grant))


def revoke_call(account, *, permission_id) -> str:
    return account.execute(account.address, 0, revoke_data(permission_id=permission_id))


def spend_call_data(*, permission_id, to: str, amount: int) -> str:
    body = encode(["bytes32", "address", "uint256"], [_id(permission_id), to, amount])
    return "0x" + (_sel("executePermitted(bytes32,address,uint256)") + body).hex()


def pack_permission_signature(permission_id, ecdsa_signature: bytes) -> str:
    return "0x" + encode(_TYPES, [PERMISSION_SIGNATURE, _id(permission_id), ecdsa_signature]).hex()


def sign_with_session_key(user_op_hash, private_key: bytes, *, permission_id) -> str:
    digest = _id(user_op_hash)
    signed = Account.sign_message(encode_defunct(primitive=digest), private_key)
    return pack_permission_signature(permission_id, bytes(signed.signature))


def dummy_permission_signature(permission_id) -> str:
    return pack_permission_signature(permission_id, bytes.fromhex(DUMMY_SIGNATURE[2:]))


def spendable(w3: Web3, account: str, permission_id) -> Spendable:
    data = _sel("spendable(bytes32)") + encode(["bytes32"], [_id(permission_id)])
    raw = w3.eth.call({"to": to_checksum_address(account), "data": data})
    return Spendable(*decode(["uint256", "uint256"], raw))


@dataclass
class SessionKeyAccount(Erc4337Account):
    w3: Web3
    account_address: str
    permission_id: bytes
    private_key: bytes
    version: str = "0.7"

    def __post_init__(self) -> None:
        self._setup()
        self.account_abi = []
        self.factory = None
        self.dummy_signature = dummy_permission_signature(self.permission_id)

    @property
    def address(self) -> str:
        return to_checksum_address(self.account_address)

    def build_spend(self, bundler: BundlerClient, *, to, amount, gas=None, nonce_key=None):
        call = spend_call_data(permission_id=self.permission_id, to=to, amount=amount)
        op = self.build(call, bundler, gas=gas, nonce_key=nonce_key or 0)
        if gas is None:
            op["verificationGasLimit"] += PERMISSION_VERIFICATION_GAS
        return op
