"""The Zodiac modifiers of a Gnosis Pay account, as production drives them: the Delay
(scheduled transactions with a cooldown) and Roles v2 (the card's spending allowance), their
ABIs from `@gnosis.pm/zodiac` 4, the calls, the ModuleTx hash and the event topics.

A daily-limit change is `Roles.setAllowance(SPENDING_ALLOWANCE_KEY, …, period = 1 day)` sent by
the Safe. The passkey account (an enabled module of the Delay) enqueues it: the passkey signs
Zodiac's ModuleTx hash of `Delay.execTransactionFromModule(roles, 0, setAllowance, Call)` and a
relayer submits it through `PasskeyAccount.execModuleTx` (not 4337). After the cooldown anyone
dispatches it with `Delay.executeNextTx`, which makes the Safe call Roles.

Deploying the modifiers (mastercopies, proxies, the setup helper) is the local stack's:
chain/zodiac.py.
"""

from __future__ import annotations

from typing import Any

from eth_abi import encode
from eth_utils import keccak, to_checksum_address

from evm.artifacts import zodiac_artifact

# keccak256("SPENDING_ALLOWANCE"): the allowance Gnosis Pay's card spends from.
SPENDING_ALLOWANCE_KEY = keccak(text="SPENDING_ALLOWANCE")
DAY = 86_400
UINT128_MAX = 2**128 - 1

_DOMAIN_TYPEHASH = keccak(text="EIP712Domain(uint256 chainId,address verifyingContract)")
_MODULE_TX_TYPEHASH = keccak(text="ModuleTx(bytes data,bytes32 salt)")


def abi(name: str) -> list[dict[str, Any]]:
    return zodiac_artifact(name)["abi"]


def set_daily_allowance_call(amount: int) -> bytes:
    """Roles.setAllowance(key, balance, maxRefill, refill, period = 1 day, timestamp = 0): the
    allowance refills to `amount` every day (Gnosis Pay's daily limit)."""
    if not 0 < amount <= UINT128_MAX:
        raise ValueError("allowance out of range")
    return keccak(text="setAllowance(bytes32,uint128,uint128,uint128,uint64,uint64)")[:4] + encode(
        ["bytes32", "uint128", "uint128", "uint128", "uint64", "uint64"],
        [SPENDING_ALLOWANCE_KEY, amount, amount, amount, DAY, 0],
    )


def exec_from_module_call(to: str, value: int, data: bytes, operation: int = 0) -> bytes:
    return keccak(text="execTransactionFromModule(address,uint256,bytes,uint8)")[:4] + encode(
        ["address", "uint256", "bytes", "uint8"], [to_checksum_address(to), value, data, operation]
    )


def execute_next_call(to: str, value: int, data: bytes, operation: int = 0) -> bytes:
    return keccak(text="executeNextTx(address,uint256,bytes,uint8)")[:4] + encode(
        ["address", "uint256", "bytes", "uint8"], [to_checksum_address(to), value, data, operation]
    )


def module_tx_hash(*, chain_id: int, modifier: str, data: bytes, salt: bytes) -> bytes:
    """Zodiac's EIP-712 ModuleTx hash (what PasskeyAccount.execModuleTx checks)."""
    domain = keccak(
        encode(["bytes32", "uint256", "address"], [_DOMAIN_TYPEHASH, chain_id, modifier])
    )
    struct = keccak(
        encode(["bytes32", "bytes32", "bytes32"], [_MODULE_TX_TYPEHASH, keccak(data), salt])
    )
    return keccak(b"\x19\x01" + domain + struct)


def exec_module_tx_call(*, modifier: str, data: bytes, salt: bytes, signature: bytes) -> bytes:
    """PasskeyAccount.execModuleTx(modifier, data, salt, signature) calldata."""
    return keccak(text="execModuleTx(address,bytes,bytes32,bytes)")[:4] + encode(
        ["address", "bytes", "bytes32", "bytes"],
        [to_checksum_address(modifier), data, salt, signature],
    )


# Event topics the reconciler reads.
TRANSACTION_ADDED = (
    "0x" + keccak(text="TransactionAdded(uint256,bytes32,address,uint256,bytes,uint8)").hex()
)
SET_ALLOWANCE = (
    "0x" + keccak(text="SetAllowance(bytes32,uint128,uint128,uint128,uint64,uint64)").hex()
)
