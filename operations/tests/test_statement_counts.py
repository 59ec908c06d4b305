"""The operations batch costs a fixed number of SQL statements per item (the
query counts of the hot paths; `bench/batches.py` measures the same at scale)."""

from __future__ import annotations

import pytest

from dev.testing import history_statuses
from operations.models import State
from operations.services import operations_process_due

from .test_operations import submit


@pytest.mark.postgres  # a transition is one statement there (core.lifecycle's CTE)
def test_one_dispatch_and_one_check_cost_a_fixed_number_of_statements(
    backend_server, funded, application, monkeypatch, django_assert_num_queries
):
    monkeypatch.undo()  # without the billing checks the conftest adds after each transition
    operation = submit(funded, application)
    # Dispatch: the batch's due ids; the dispatch claim (next check postponed, then the
    # dispatch started on the row read once); the status read and the transition to waiting
    # (conditional UPDATE and history INSERT in one statement, core.lifecycle).
    with django_assert_num_queries(6) as captured:
        assert operations_process_due(limit=10) == {State.WAITING: 1}
    assert [q["sql"].split()[0] for q in captured.captured_queries] == [
        "SELECT",
        "UPDATE",
        "SELECT",
        "UPDATE",
        "SELECT",
        "WITH",
    ]
    backend_server.work_seconds = 0  # the backend's work is done when it is checked
    # Check: the due ids; the operation; then in one savepoint its locked re-read, the wallet
    # locked once, the capture and the release (UPDATE + ledger INSERT each), the billing
    # components read once and inserted in one statement, the transition (one statement).
    with django_assert_num_queries(13):
        outcome = operations_process_due(limit=10)
    assert outcome == {State.SUCCEEDED: 1}
    assert history_statuses(operation)[-1] == State.SUCCEEDED
