"""Deploying the Zodiac modifiers of a Gnosis Pay account on the local stack: the mastercopies
and ModuleProxyFactory from `@gnosis.pm/zodiac` 4's init code, the Delay and Roles v2 proxies,
and our GnosisPaySetup helper that sets them up inside Safe.setup. What production does with
them (the calls, hashes and ABIs) is evm/zodiac.py.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from eth_abi import encode
from eth_utils import keccak, to_bytes, to_checksum_address

from chain import contracts

ZODIAC = contracts.NODE_MODULES / "@gnosis.pm" / "zodiac" / "dist" / "cjs"


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
