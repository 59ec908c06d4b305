"""Zodiac modifiers of a Gnosis Pay account: the Delay (scheduled transactions with a cooldown)
and Roles v2 (the card's spending allowance), from `@gnosis.pm/zodiac` 4's mastercopy init
code and ABIs, deployed as minimal proxies by Zodiac's ModuleProxyFactory.

A daily-limit change is `Roles.setAllowance(SPENDING_ALLOWANCE_KEY, …, period = 1 day)` sent by
the Safe. The passkey account (an enabled module of the Delay) enqueues it: the passkey signs
Zodiac's ModuleTx hash of `Delay.execTransactionFromModule(roles, 0, setAllowance, Call)` and a
relayer submits it through `PasskeyAccount.execModuleTx` (not 4337). After the cooldown anyone
dispatches it with `Delay.executeNextTx`, which makes the Safe call Roles.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from eth_abi import encode
from eth_utils import keccak, to_bytes, to_checksum_address

from chain import contracts

ZODIAC = contracts.NODE_MODULES / "@gnosis.pm" / "zodiac" / "dist" / "cjs"
# keccak256("SPENDING_ALLOWANCE"): the allowance Gnosis Pay's card spends from.
SPENDING_ALLOWANCE_KEY = keccak(text="SPENDING_ALLOWANCE")
DAY = 86_400
UINT128_MAX = 2**128 - 1

_DOMAIN_TYPEHASH = keccak(text="EIP712Domain(uint256 chainId,address verifyingContract)")
_MODULE_TX_TYPEHASH = keccak(text="ModuleTx(bytes data,bytes32 salt)")


@cache
def init_data(name: str) -> tuple[str, bytes]:
    """(salt, initcode) of a mastercopy, from the package's initData/<name>.js."""
    path = ZODIAC / "initData" / f"{name}.js"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: install the chain stack's npm packages")
    text = path.read_text()
    salt = re.search(r'exports\.salt = "(0x[0-9a-fA-F]{64})"', text)[1]
    code = re.search(r'exports\.initCode = "(0x[0-9a-fA-F]+)"', text)[1]
    return salt, to_bytes(hexstr=code)


@cache
def abi(name: str) -> list[dict[str, Any]]:
    return json.loads((ZODIAC / "abi" / f"{name}.json").read_text())


def mastercopy_address(name: str) -> str:
    salt, code = init_data(name)
    return contracts.create2_address(salt, code)


def factory_address() -> str:
    return mastercopy_address("ModuleProxyFactory")


def setup_helper_address() -> str:
    return contracts.create2_address(
        contracts.FACTORY_SALT,
        to_bytes(hexstr=contracts.build_artifact("GnosisPaySetup")["bytecode"]),
    )


def deployments() -> dict[str, tuple[str, bytes]]:
    """What the local stack deploys through the CREATE2 deployer: name → (salt, initcode)."""
    items = {name: init_data(name) for name in ("ModuleProxyFactory", "Delay", "RolesV2")}
    items["GnosisPaySetup"] = (
        contracts.FACTORY_SALT,
        to_bytes(hexstr=contracts.build_artifact("GnosisPaySetup")["bytecode"]),
    )
    return items


def _set_up(types: list[str], values: list[Any]) -> bytes:
    return keccak(text="setUp(bytes)")[:4] + encode(["bytes"], [encode(types, values)])


def delay_initializer(safe: str, cooldown: int, expiration: int) -> bytes:
    safe = to_checksum_address(safe)
    return _set_up(
        ["address", "address", "address", "uint256", "uint256"],
        [safe, safe, safe, cooldown, expiration],
    )


def roles_initializer(safe: str) -> bytes:
    safe = to_checksum_address(safe)
    return _set_up(["address", "address", "address"], [safe, safe, safe])


def module_proxy_address(mastercopy: str, initializer: bytes, salt_nonce: int = 0) -> str:
    """Where ModuleProxyFactory.deployModule puts the EIP-1167 proxy (CREATE2)."""
    deployment = (
        bytes.fromhex("602d8060093d393df3363d3d373d3d3d363d73")
        + to_bytes(hexstr=mastercopy)
        + bytes.fromhex("5af43d82803e903d91602b57fd5bf3")
    )
    salt = keccak(keccak(initializer) + salt_nonce.to_bytes(32, "big"))
    return to_checksum_address(
        keccak(b"\xff" + to_bytes(hexstr=factory_address()) + salt + keccak(deployment))[12:]
    )


def delay_address(safe: str, cooldown: int, expiration: int) -> str:
    return module_proxy_address(
        mastercopy_address("Delay"), delay_initializer(safe, cooldown, expiration)
    )


def roles_address(safe: str) -> str:
    return module_proxy_address(mastercopy_address("RolesV2"), roles_initializer(safe))


def setup_call(*, module: str, cooldown: int, expiration: int) -> bytes:
    """GnosisPaySetup.setUpModules(…) calldata, for Safe.setup's delegatecall hook."""
    return keccak(text="setUpModules(address,address,address,address,uint256,uint256)")[
        :4
    ] + encode(
        ["address", "address", "address", "address", "uint256", "uint256"],
        [
            factory_address(),
            mastercopy_address("Delay"),
            mastercopy_address("RolesV2"),
            to_checksum_address(module),
            cooldown,
            expiration,
        ],
    )


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
