"""Artifacts and canonical addresses of the contracts the local chain stack deploys."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from eth_utils import keccak, to_bytes, to_checksum_address

from evm.userops import ENTRY_POINT_ADDRESSES

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


# --- Our own contracts (chain/contracts/*.sol, compiled by compile.mjs into chain/build/) ----
BUILD_DIR = Path(__file__).resolve().parent / "build"
SOURCES_DIR = Path(__file__).resolve().parent / "contracts"

# Demo ERC-20s deployed on the dev chain: symbol → (name, decimals, CREATE2 salt).
DEMO_TOKENS = {
    "USDC": ("Demo USD Coin", 6, "0x" + "00" * 31 + "0a"),
    "EURe": ("Demo Monerium EUR emoney", 18, "0x" + "00" * 31 + "0b"),
}
DEMO_TOKEN_OWNER = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"  # Hardhat dev account #0


def build_stale() -> bool:
    if not BUILD_DIR.exists():
        return True
    built = min((p.stat().st_mtime for p in BUILD_DIR.glob("*.json")), default=0)
    return any(p.stat().st_mtime > built for p in SOURCES_DIR.glob("*.sol"))


@cache
def build_artifact(name: str) -> dict[str, Any]:
    path = BUILD_DIR / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: compile the contracts (node chain/compile.mjs)"
        )
    return json.loads(path.read_text())


def _with_args(bytecode: str, types: list[str], values: list[Any]) -> bytes:
    from eth_abi import encode

    return to_bytes(hexstr=bytecode) + encode(types, values)


def passkey_factory_initcode(version: str) -> bytes:
    return _with_args(
        build_artifact("PasskeyAccountFactory")["bytecode"],
        ["address"],
        [ENTRY_POINTS[version]["address"]],
    )


def passkey_factory_address(version: str) -> str:
    return create2_address(FACTORY_SALT, passkey_factory_initcode(version))


def demo_token_initcode(symbol: str) -> bytes:
    name, decimals, _salt = DEMO_TOKENS[symbol]
    return _with_args(
        build_artifact("DemoToken")["bytecode"],
        ["string", "string", "uint8", "address"],
        [name, symbol, decimals, DEMO_TOKEN_OWNER],
    )


def demo_token_address(symbol: str) -> str:
    return create2_address(DEMO_TOKENS[symbol][2], demo_token_initcode(symbol))


ROUTER_SALT = "0x" + "00" * 31 + "0c"
# Demo rates (out base units per 1e18 in base units): 1 USDC = 0.92 EURe, 1 EURe = 1.08 USDC.
DEMO_RATES = {("USDC", "EURe"): 920_000_000_000_000_000 * 10**12, ("EURe", "USDC"): 1_080_000}


def swap_router_initcode() -> bytes:
    return _with_args(build_artifact("DemoSwapRouter")["bytecode"], ["address"], [DEMO_TOKEN_OWNER])


def swap_router_address() -> str:
    return create2_address(ROUTER_SALT, swap_router_initcode())


VAULT_SALT = "0x" + "00" * 31 + "0e"
# The demo ERC-4626 vault: share symbol → (name, underlying demo token).
DEMO_VAULTS = {"svUSDC": ("Demo USDC Savings", "USDC")}


def demo_vault_initcode(symbol: str) -> bytes:
    name, underlying = DEMO_VAULTS[symbol]
    return _with_args(
        build_artifact("DemoVault")["bytecode"],
        ["address", "string", "string"],
        [demo_token_address(underlying), name, symbol],
    )


def demo_vault_address(symbol: str) -> str:
    return create2_address(VAULT_SALT, demo_vault_initcode(symbol))


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
