"""Artifacts and canonical addresses of the contracts the local chain stack deploys."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from eth_utils import keccak, to_bytes, to_checksum_address

from actions.userops import ENTRY_POINT_ADDRESSES

NODE_MODULES = Path(__file__).resolve().parent / "node_modules"

# Arachnid's deterministic deployment proxy: calldata = salt ‖ initcode, returns the address.
CREATE2_DEPLOYER = "0x4e59b44847b379578588920cA78FbF26c0B4956C"
CREATE2_DEPLOYER_CODE = (
    "0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffe03601600081602082378035"
    "828234f58015156039578182fd5b8082525050506014600cf3"
)

# Official salts of eth-infinitism's deployments; with the npm artifacts they land on the
# canonical addresses (checked at deploy time).
ENTRY_POINTS = {
    "0.7": {
        "package": "aa-contracts-v07",
        "salt": "0x90d8084deab30c2a37c45e8d47f49f2f7965183cb6990a98943ef94940681de3",
        "address": ENTRY_POINT_ADDRESSES["0.7"],
    },
    "0.8": {
        "package": "aa-contracts-v08",
        "salt": "0x0a59dbff790c23c976a548690c27297883cc66b4c67024f9117b0238995e35e9",
        "address": ENTRY_POINT_ADDRESSES["0.8"],
    },
}
FACTORY_SALT = "0x" + "00" * 31 + "01"


@cache
def artifact(version: str, name: str) -> dict[str, Any]:
    """A Hardhat artifact (abi, bytecode) from `@account-abstraction/contracts` for a version."""
    path = NODE_MODULES / ENTRY_POINTS[version]["package"] / "artifacts" / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: install the chain stack's npm packages (make deps)"
        )
    return json.loads(path.read_text())


def create2_address(salt: str, initcode: bytes) -> str:
    return to_checksum_address(
        keccak(
            b"\xff" + to_bytes(hexstr=CREATE2_DEPLOYER) + to_bytes(hexstr=salt) + keccak(initcode)
        )[12:]
    )


def simple_account_factory_initcode(version: str) -> bytes:
    bytecode = to_bytes(hexstr=artifact(version, "SimpleAccountFactory")["bytecode"])
    return bytecode + bytes(12) + to_bytes(hexstr=ENTRY_POINTS[version]["address"])


def simple_account_factory_address(version: str) -> str:
    return create2_address(FACTORY_SALT, simple_account_factory_initcode(version))
