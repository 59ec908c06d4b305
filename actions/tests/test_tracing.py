"""Beat's reconcile pass follows each action in the trace of the request that proposed it: the
bundler call carries a span of it, and so do the history rows it writes."""

from __future__ import annotations

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.services import actions_reconcile_pending
from actions.tests.factories import make_action
from actions.tests.test_reconcile import bundler, receipt  # noqa: F401 - shared fixture
from core import tracing
from core.lifecycle import Actor, transition

S = ActionStatus
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def test_reconciliation_continues_the_trace_that_proposed_the_action(
    bundler,  # noqa: F811
    user,
    application,
):
    with tracing.span(PARENT):  # the agent's request
        action = make_action(user=user, application=application)
    for step in (S.SIGNED, S.SUBMITTED, S.BROADCAST):  # outside any trace (no request)
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    bundler.result = receipt()
    with tracing.span() as beat:
        assert actions_reconcile_pending() == {"executed": 1}
    action = Action.objects.get(pk=action.pk)
    assert action.status == S.EXECUTED and action.trace_id == TRACE_ID
    rows = dict(action.history.values_list("status", "trace_id"))
    assert rows == {
        S.PROPOSED: TRACE_ID,
        S.SIGNED: "",
        S.SUBMITTED: "",
        S.BROADCAST: "",
        S.EXECUTED: TRACE_ID,
    }
    sent = [tracing.parse(h.get("traceparent")) for h in bundler.headers]
    assert sent and all(s is not None and s.trace_id == TRACE_ID for s in sent)
    assert beat.trace_id != TRACE_ID
