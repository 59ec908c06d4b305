"""Slither's static analysis of our contracts: every finding is fixed or explained in chain/slither.md."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from crytic_compile import CryticCompile
from crytic_compile.platform.solc_standard_json import SolcStandardJson
from slither import Slither
from slither.detectors import all_detectors
from slither.detectors.abstract_detector import AbstractDetector

pytestmark = pytest.mark.chain

ROOT = Path(__file__).resolve().parents[2]
CHAIN = ROOT / "chain"
# The row of a finding: | detector | location | verdict | why |
ROW = re.compile(r"^\| ([a-z0-9-]+) \| ([A-Za-z0-9_.]+) \| ([a-z ]+) \| (.+) \|$")


def _location(element: dict) -> str:
    """Contract.function (or Contract.function.parameter): stable when lines move."""
    parent = element.get("type_specific_fields", {}).get("parent")
    name = element["name"].split("(")[0]
    return f"{_location(parent)}.{name}" if parent else name


def slither_findings() -> set[tuple[str, str]]:
    """(detector, location) of every finding of all Slither detectors on chain/contracts/*.sol,
    compiled with compile.mjs's settings."""
    sources = sorted(p.relative_to(ROOT).as_posix() for p in (CHAIN / "contracts").glob("*.sol"))
    standard_json = {
        "language": "Solidity",
        "sources": {path: {"urls": [path]} for path in sources},
        "settings": {
            "optimizer": {"enabled": True, "runs": 200},
            "evmVersion": "cancun",
            "remappings": ["@openzeppelin/=chain/node_modules/@openzeppelin/"],
        },
    }
    compilation = CryticCompile(
        SolcStandardJson(standard_json), solc=str(CHAIN / "bin" / "solc"), solc_working_dir=ROOT
    )
    slither = Slither(compilation, filter_paths=["node_modules"])
    detectors = [
        d
        for _, d in inspect.getmembers(all_detectors, inspect.isclass)
        if issubclass(d, AbstractDetector)
    ]
    assert len(detectors) > 90, "Slither's detectors were not all loaded"
    for detector in detectors:
        slither.register_detector(detector)
    findings = set()
    for result in (r for results in slither.run_detectors() for r in results):
        findings.add((result["check"], _location(result["elements"][0])))
    return findings


def explained_findings(text: str) -> set[tuple[str, str]]:
    rows = set()
    for line in text.splitlines():
        match = ROW.match(line)
        if match and match.group(1) != "detector":
            rows.add((match.group(1), match.group(2)))
    return rows


@pytest.fixture(scope="module")
def findings() -> set[tuple[str, str]]:
    return slither_findings()


def test_every_slither_finding_is_explained_in_slither_md(findings):
    explained = explained_findings((CHAIN / "slither.md").read_text())
    assert findings, "Slither reported nothing: the analysis did not run on our sources"
    unexplained = sorted(findings - explained)
    assert not unexplained, (
        f"Slither findings not fixed nor explained in chain/slither.md: {unexplained}"
    )
    stale = sorted(explained - findings)
    assert not stale, f"rows in chain/slither.md that Slither no longer reports: {stale}"


def test_an_unexplained_finding_fails_the_check(findings):
    """The check reads the file's table: a finding without its row is reported."""
    text = (CHAIN / "slither.md").read_text()
    without = "\n".join(
        line
        for line in text.splitlines()
        if "| timestamp | PasskeyAccount.executeRecovery |" not in line
    )
    assert ("timestamp", "PasskeyAccount.executeRecovery") in findings
    assert findings - explained_findings(without) == {
        ("timestamp", "PasskeyAccount.executeRecovery")
    }
