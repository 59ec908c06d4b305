"""What the local chain stack deploys besides the contracts production talks to (those are
evm/artifacts.py, read from the committed evm/artifacts.json): SimpleAccount's factory, the demo
tokens, swap router and vault, the Safe factory. Their artifacts are read here, from the npm
packages and our compiled contracts (chain/node_modules, chain/build), which only the dev stack
has; `python -m chain.export_artifacts` copies production's part of them into evm/."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from eth_utils import to_bytes

from chain.export_artifacts import BUILD_DIR, NODE_MODULES

# The stack deploys these too; the names stay here for the stack, the demo data and the tests.
from evm.artifacts import (  # noqa: F401
    CREATE2_DEPLOYER,
    CREATE2_DEPLOYER_CODE,
    ENTRY_POINTS,
    FACTORY_SALT,
    SAFE_SALT,
    MissingArtifact,
    create2_address,
    passkey_factory_address,
    passkey_factory_initcode,
    with_args,
)

SOURCES_DIR = Path(__file__).resolve().parent / "contracts"
SAFE_ARTIFACTS = (
    NODE_MODULES / "@safe-global" / "safe-contracts" / "build" / "artifacts" / "contracts"
)
_SAFE_PATHS = {
    "Safe": "Safe.sol/Safe.json",
    "SafeProxyFactory": "proxies/SafeProxyFactory.sol/SafeProxyFactory.json",
    "CompatibilityFallbackHandler": (
        "handler/CompatibilityFallbackHandler.sol/CompatibilityFallbackHandler.json"
    ),
}


def _read(path: Path, hint: str) -> dict[str, Any]:
    if not path.exists():
        raise MissingArtifact(f"{path} is missing: {hint}")
    return json.loads(path.read_text())


@cache
def artifact(version: str, name: str) -> dict[str, Any]:
    """A Hardhat artifact (abi, bytecode) from `@account-abstraction/contracts` for a version."""
    path = NODE_MODULES / ENTRY_POINTS[version]["package"] / "artifacts" / f"{name}.json"
    return _read(path, "install the chain stack's npm packages (make deps)")


@cache
def build_artifact(name: str) -> dict[str, Any]:
    """One of our contracts as compile.mjs wrote it (abi, bytecode)."""
    return _read(BUILD_DIR / f"{name}.json", "compile the contracts (node chain/compile.mjs)")


@cache
def safe_artifact(name: str) -> dict[str, Any]:
    """Safe 1.4.1 from @safe-global/safe-contracts."""
    return _read(SAFE_ARTIFACTS / _SAFE_PATHS[name], "install the chain stack's npm packages")


def safe_initcode(name: str) -> bytes:
    return to_bytes(hexstr=safe_artifact(name)["bytecode"])


def safe_address(name: str) -> str:
    return create2_address(SAFE_SALT, safe_initcode(name))


def simple_account_factory_initcode(version: str) -> bytes:
    bytecode = to_bytes(hexstr=artifact(version, "SimpleAccountFactory")["bytecode"])
    return bytecode + bytes(12) + to_bytes(hexstr=ENTRY_POINTS[version]["address"])


def simple_account_factory_address(version: str) -> str:
    return create2_address(FACTORY_SALT, simple_account_factory_initcode(version))


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
    sources = [
        *SOURCES_DIR.glob("*.sol"),
        *SOURCES_DIR.glob("*.yul"),
        *SOURCES_DIR.glob("bench/*.sol"),
    ]
    return any(p.stat().st_mtime > built for p in sources)


def demo_token_initcode(symbol: str) -> bytes:
    name, decimals, _salt = DEMO_TOKENS[symbol]
    return with_args(
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
    return with_args(build_artifact("DemoSwapRouter")["bytecode"], ["address"], [DEMO_TOKEN_OWNER])


def swap_router_address() -> str:
    return create2_address(ROUTER_SALT, swap_router_initcode())


VAULT_SALT = "0x" + "00" * 31 + "0e"
# The demo ERC-4626 vault: share symbol → (name, underlying demo token).
DEMO_VAULTS = {"svUSDC": ("Demo USDC Savings", "USDC")}


def demo_vault_initcode(symbol: str) -> bytes:
    name, underlying = DEMO_VAULTS[symbol]
    return with_args(
        build_artifact("DemoVault")["bytecode"],
        ["address", "string", "string"],
        [demo_token_address(underlying), name, symbol],
    )


def demo_vault_address(symbol: str) -> str:
    return create2_address(VAULT_SALT, demo_vault_initcode(symbol))
