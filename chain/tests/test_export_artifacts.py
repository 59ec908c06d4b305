"""evm/artifacts.json, the only contract file production reads, is what a fresh compile of
chain/contracts and the installed npm packages give: a changed contract, a bumped package or a
forgotten `python -m chain.export_artifacts` fails here, not as a wrong CREATE2 address in
production."""

from __future__ import annotations

import json
import subprocess

import pytest

from chain import export_artifacts
from chain.stack import CHAIN_DIR, NODE22
from evm import artifacts

pytestmark = pytest.mark.chain  # solc-js and the npm packages (chain/node_modules)


def test_the_committed_artifacts_are_a_fresh_compile_and_the_npm_packages(tmp_path):
    from chain import contracts

    # chain/build is a compile of these sources unless one changed since (make deps compiles
    # into it on a clean clone, as in CI): only a stale build is compiled again here.
    build_dir = export_artifacts.BUILD_DIR
    if contracts.build_stale():
        subprocess.run(
            [str(NODE22), str(CHAIN_DIR / "compile.mjs"), str(tmp_path)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        build_dir = tmp_path
    fresh = export_artifacts.collect(build_dir=build_dir)
    committed = artifacts.ARTIFACTS_FILE.read_text()
    assert json.loads(committed) == fresh, "run `python -m chain.export_artifacts` and commit"
    # Byte for byte too, so regenerating it never shows a spurious diff.
    assert committed == export_artifacts.render(fresh)


def test_production_addresses_follow_from_the_committed_file():
    """What the stack deploys (chain/contracts.py over node_modules and the build) lands where
    production looks (evm/artifacts.py over the committed file)."""
    from chain import contracts

    for version in artifacts.ENTRY_POINTS:
        production = artifacts.artifact(version, "EntryPoint")["abi"]
        assert production == contracts.artifact(version, "EntryPoint")["abi"]
    assert artifacts.safe_address("CompatibilityFallbackHandler") == contracts.safe_address(
        "CompatibilityFallbackHandler"
    )
    factory = contracts.with_args(
        contracts.build_artifact("PasskeyAccountFactory")["bytecode"],
        ["address"],
        [artifacts.ENTRY_POINTS["0.7"]["address"]],
    )
    assert artifacts.passkey_factory_address("0.7") == contracts.create2_address(
        contracts.FACTORY_SALT, factory
    )
