"""The chaos test's mode (picnic/tests/test_chaos.py): the failover mode unless asked otherwise,
and an engine that is not installed skips it on a developer's machine but fails it in CI."""

from __future__ import annotations

import pytest

from picnic.tests import test_chaos as chaos


@pytest.mark.parametrize(
    ("environ", "mode"),
    [
        ({}, (True, False)),  # a developer's machine: failover; a missing engine skips
        ({"PICNIC_REQUIRE_POSTGRES": "1"}, (True, True)),  # CI: failover; a missing one fails
        ({"PICNIC_CHAOS_FAILOVER": "1"}, (True, True)),  # asked for: a missing one fails
        ({"PICNIC_CHAOS_FAILOVER": "0"}, (False, False)),  # the quick run on single nodes
        ({"PICNIC_CHAOS_FAILOVER": "0", "PICNIC_REQUIRE_POSTGRES": "1"}, (False, True)),
    ],
)
def test_the_failover_mode_is_the_default(environ, mode):
    assert chaos.chaos_mode(environ) == mode


def test_an_unknown_mode_is_refused():
    with pytest.raises(pytest.UsageError, match="PICNIC_CHAOS_FAILOVER='yes'"):
        chaos.chaos_mode({"PICNIC_CHAOS_FAILOVER": "yes"})


def test_a_missing_engine_fails_in_ci_and_skips_elsewhere_saying_how_to_run_without_it(
    monkeypatch,
):
    monkeypatch.setattr(chaos, "FAILOVER", True)
    monkeypatch.setattr(chaos, "REQUIRE_ENGINES", True)
    with pytest.raises(pytest.fail.Exception, match="needs pg_auto_failover"):
        chaos.missing_engine("pg_auto_failover")
    monkeypatch.setattr(chaos, "REQUIRE_ENGINES", False)
    with pytest.raises(pytest.skip.Exception, match="PICNIC_CHAOS_FAILOVER=0 runs"):
        chaos.missing_engine("pg_auto_failover")
