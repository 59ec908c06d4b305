"""bench/balances.py runs end to end at a tiny size (its own local world and fresh database):
the script keeps working as the code moves. No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.chain
ROOT = Path(__file__).resolve().parents[2]


def test_the_balances_bench_runs_at_a_tiny_size():
    result = subprocess.run(
        [
            sys.executable,
            "bench/balances.py",
            "--accounts",
            "1",
            "--rounds",
            "2",
            "--requests",
            "2",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert any(line.strip().startswith("one chain: p50") for line in lines), result.stdout
    assert any(line.strip().startswith("two chains: p50") for line in lines), result.stdout
    assert any(line.startswith("two chains / one chain at p50: ") for line in lines)
