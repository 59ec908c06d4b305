"""Write evm/artifacts.json: the ABIs and bytecode production reads, taken from the chain
stack's npm packages (chain/node_modules) and our compiled contracts (chain/build).

    python -m chain.export_artifacts

`make deps` runs it after compiling, and so does the local stack when it recompiles a changed
source, so the committed file follows the sources; chain/tests/test_export_artifacts.py fails
when it does not. Production installs neither node_modules nor the build: the file is all it
reads (evm/artifacts.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CHAIN_DIR = Path(__file__).resolve().parent
NODE_MODULES = CHAIN_DIR / "node_modules"
BUILD_DIR = CHAIN_DIR / "build"
TARGET = CHAIN_DIR.parent / "evm" / "artifacts.json"

SAFE = Path("@safe-global/safe-contracts/build/artifacts/contracts")
ZODIAC = Path("@gnosis.pm/zodiac/dist/cjs/abi")

# What production reads, each as (group, name) → (where under node_modules or the build, the
# fields kept). Bytecode only where production computes a CREATE2 address or sends the code.
NPM = {
    ("0.7", "EntryPoint"): (Path("aa-contracts-v07/artifacts/EntryPoint.json"), ("abi",)),
    ("0.8", "EntryPoint"): (Path("aa-contracts-v08/artifacts/EntryPoint.json"), ("abi",)),
    ("safe", "Safe"): (SAFE / "Safe.sol/Safe.json", ("abi",)),
    ("safe", "CompatibilityFallbackHandler"): (
        SAFE / "handler/CompatibilityFallbackHandler.sol/CompatibilityFallbackHandler.json",
        ("abi", "bytecode"),
    ),
    ("zodiac", "Delay"): (ZODIAC / "Delay.json", ()),
    ("zodiac", "RolesV2"): (ZODIAC / "RolesV2.json", ()),
}
BUILT = {
    "PasskeyAccount": ("abi",),
    "PasskeyAccountFactory": ("abi", "bytecode"),
    "WordReader": ("bytecode",),
}
# The npm packages the file's parts come from, with their versions (package.json).
PACKAGES = (
    "aa-contracts-v07",
    "aa-contracts-v08",
    "@safe-global/safe-contracts",
    "@gnosis.pm/zodiac",
)


def _read(path: Path) -> Any:
    if not path.exists():
        sys.exit(f"{path} is missing: run `make deps` (npm packages, compiled contracts)")
    return json.loads(path.read_text())


def collect(*, node_modules: Path = NODE_MODULES, build_dir: Path = BUILD_DIR) -> dict[str, Any]:
    """The file's content from a node_modules tree and a build directory."""
    out: dict[str, Any] = {
        "generated_by": "python -m chain.export_artifacts",
        "packages": {},
        "contracts": {},
    }
    for package in PACKAGES:
        meta = _read(node_modules / package / "package.json")
        out["packages"][package] = f"{meta['name']}@{meta['version']}"
    for (group, name), (path, fields) in NPM.items():
        data = _read(node_modules / path)
        # Zodiac ships bare ABIs (a list), the others Hardhat artifacts.
        entry = {"abi": data} if isinstance(data, list) else {f: data[f] for f in fields}
        out["contracts"].setdefault(group, {})[name] = entry
    for name, fields in BUILT.items():
        data = _read(build_dir / f"{name}.json")
        out["contracts"].setdefault("picnic", {})[name] = {f: data[f] for f in fields}
    return out


def render(content: dict[str, Any]) -> str:
    return json.dumps(content, indent=1, sort_keys=True) + "\n"


def main() -> None:
    text = render(collect())
    if not TARGET.exists() or TARGET.read_text() != text:
        TARGET.write_text(text)
        print(f"wrote {TARGET.relative_to(CHAIN_DIR.parent)}")


if __name__ == "__main__":
    main()
