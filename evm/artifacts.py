"""Where production reads the contracts it talks to: ABIs and bytecode, and the CREATE2
addresses they imply (the canonical EntryPoints, our passkey-account factory, Safe 1.4.1).

The files are the chain stack's npm packages and our compiled contracts, which `make deps`
installs and builds under chain/ (node_modules/, build/): reading them is a file read, not an
import of the dev stack. chain/contracts.py adds what only the local stack deploys."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from eth_abi import encode
from eth_utils import keccak, to_bytes, to_checksum_address

from evm.userops import ENTRY_POINT_ADDRESSES

CHAIN_DIR = Path(__file__).resolve().parent.parent / "chain"

NODE_MODULES = CHAIN_DIR / "node_modules"

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
    """A contract file `make deps` installs or builds is not there: a broken installation,
    never a chain that is down (so not an OSError, which the RPC error handling catches)."""


@cache
def artifact(version: str, name: str) -> dict[str, Any]:
    """A Hardhat artifact (abi, bytecode) from `@account-abstraction/contracts` for a version."""
    path = NODE_MODULES / ENTRY_POINTS[version]["package"] / "artifacts" / f"{name}.json"
    if not path.exists():
        raise MissingArtifact(
            f"{path} is missing: install the chain stack's npm packages (make deps)"
        )
    return json.loads(path.read_text())


def create2_address(salt: str, initcode: bytes) -> str:
    return to_checksum_address(
        keccak(
            b"\xff" + to_bytes(hexstr=CREATE2_DEPLOYER) + to_bytes(hexstr=salt) + keccak(initcode)
        )[12:]
    )


# --- Our own contracts (chain/contracts/*.sol and *.yul, compiled by compile.mjs into chain/build/) ----
BUILD_DIR = CHAIN_DIR / "build"


@cache
def build_artifact(name: str) -> dict[str, Any]:
    path = BUILD_DIR / f"{name}.json"
    if not path.exists():
        raise MissingArtifact(f"{path} is missing: compile the contracts (node chain/compile.mjs)")
    return json.loads(path.read_text())


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
SAFE_ARTIFACTS = (
    NODE_MODULES / "@safe-global" / "safe-contracts" / "build" / "artifacts" / "contracts"
)
SAFE_SALT = "0x" + "00" * 31 + "0d"


@cache
def safe_artifact(name: str) -> dict[str, Any]:
    path = {
        "Safe": SAFE_ARTIFACTS / "Safe.sol" / "Safe.json",
        "SafeProxyFactory": SAFE_ARTIFACTS
        / "proxies"
        / "SafeProxyFactory.sol"
        / "SafeProxyFactory.json",
        "CompatibilityFallbackHandler": SAFE_ARTIFACTS
        / "handler"
        / "CompatibilityFallbackHandler.sol"
        / "CompatibilityFallbackHandler.json",
    }[name]
    return json.loads(path.read_text())


def safe_initcode(name: str) -> bytes:
    return to_bytes(hexstr=safe_artifact(name)["bytecode"])


def safe_address(name: str) -> str:
    return create2_address(SAFE_SALT, safe_initcode(name))
