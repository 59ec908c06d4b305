"""Where production reads the contracts it talks to: ABIs and bytecode, and the CREATE2
addresses they imply (the canonical EntryPoints, our passkey-account factory, Safe 1.4.1).

They are in evm/artifacts.json, a file of this package committed with it, so a production
install needs neither the chain stack's npm packages nor our compiled contracts (chain/
node_modules and chain/build, which the file is made from by `python -m chain.export_artifacts`).
chain/contracts.py reads those two for what only the local stack deploys."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from eth_abi import encode
from eth_utils import keccak, to_bytes, to_checksum_address

from evm.userops import ENTRY_POINT_ADDRESSES

ARTIFACTS_FILE = Path(__file__).resolve().parent / "artifacts.json"

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


class MissingArtifact(RuntimeError):
    """A contract production needs is not in evm/artifacts.json: a broken installation or a
    name chain/export_artifacts.py does not export, never a chain that is down (so not an
    OSError, which the RPC error handling catches)."""


@cache
def _contracts() -> dict[str, dict[str, dict[str, Any]]]:
    if not ARTIFACTS_FILE.exists():
        raise MissingArtifact(f"{ARTIFACTS_FILE} is missing: a broken installation")
    return json.loads(ARTIFACTS_FILE.read_text())["contracts"]


def _entry(group: str, name: str) -> dict[str, Any]:
    try:
        return _contracts()[group][name]
    except KeyError:
        raise MissingArtifact(
            f"{group}/{name} is not in {ARTIFACTS_FILE.name}: add it to "
            "chain/export_artifacts.py and run `python -m chain.export_artifacts`"
        ) from None


def artifact(version: str, name: str) -> dict[str, Any]:
    """From `@account-abstraction/contracts` of a version: the EntryPoint's ABI."""
    return _entry(version, name)


def create2_address(salt: str, initcode: bytes) -> str:
    return to_checksum_address(
        keccak(
            b"\xff" + to_bytes(hexstr=CREATE2_DEPLOYER) + to_bytes(hexstr=salt) + keccak(initcode)
        )[12:]
    )


# --- Our own contracts (chain/contracts/*.sol and *.yul, compiled by chain/compile.mjs) ----------


def build_artifact(name: str) -> dict[str, Any]:
    return _entry("picnic", name)


def with_args(bytecode: str, types: list[str], values: list[Any]) -> bytes:
    return to_bytes(hexstr=bytecode) + encode(types, values)


def passkey_factory_initcode(version: str) -> bytes:
    return with_args(
        build_artifact("PasskeyAccountFactory")["bytecode"],
        ["address"],
        [ENTRY_POINTS[version]["address"]],
    )


def passkey_factory_address(version: str) -> str:
    return create2_address(FACTORY_SALT, passkey_factory_initcode(version))


# --- Safe 1.4.1 (a 1/1 Safe as Gnosis Pay uses), from @safe-global/safe-contracts --------------
SAFE_SALT = "0x" + "00" * 31 + "0d"


def safe_artifact(name: str) -> dict[str, Any]:
    return _entry("safe", name)


def zodiac_artifact(name: str) -> dict[str, Any]:
    """A Zodiac modifier's ABI (`@gnosis.pm/zodiac` 4): Delay, RolesV2."""
    return _entry("zodiac", name)


def safe_initcode(name: str) -> bytes:
    return to_bytes(hexstr=safe_artifact(name)["bytecode"])


def safe_address(name: str) -> str:
    return create2_address(SAFE_SALT, safe_initcode(name))
