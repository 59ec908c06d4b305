"""Beat's pass over operations continues, per operation, the trace of the request that created
it: the backend call carries it and so does every history row."""

from __future__ import annotations

from core import tracing
from operations.models import Operation
from operations.services import operation_submit, operations_process_due

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def test_beat_dispatches_each_operation_in_the_trace_that_created_it(backend_server, funded):
    with tracing.span(PARENT):  # the API request (its on-commit dispatch is lost here)
        operation = operation_submit(
            owner=funded,
            application=None,
            tool="text-gen",
            category="writing",
            input_text="Write a haiku about picnics",
        )
    with tracing.span() as beat:
        outcomes = operations_process_due()
    assert sum(outcomes.values()) == 1, outcomes
    operation = Operation.objects.get(pk=operation.pk)
    assert operation.trace_id == TRACE_ID
    rows = list(operation.history.values_list("status", "trace_id"))
    assert len(rows) >= 2 and {trace for _, trace in rows} == {TRACE_ID}, rows
    [create] = backend_server.creates
    assert tracing.parse(create["traceparent"]).trace_id == TRACE_ID != beat.trace_id
