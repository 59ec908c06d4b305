"""The primitives every seam of an action uses: the transition, a visible change that is not
a transition (`action_touch`), and what reconciling one action can end in."""

from __future__ import annotations

import enum
from typing import Any

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from core.lifecycle import touch


class ReconcileOutcome(enum.StrEnum):
    NOT_PENDING = "not_pending"
    PENDING = "pending"  # bundler has no receipt yet
    UNAVAILABLE = "unavailable"  # bundler down, slow or answering garbage
    EXECUTED = "executed"
    FAILED = "failed"
    RACED = "raced"  # another reconciler got there first


def action_touch(*, action_id, **changes: Any) -> bool:
    """A change people see that is not a transition (an error): updated_at and an event."""
    return touch(lifecycle=ACTION_LIFECYCLE, pk=action_id, changes=changes)


def outcome_of(action: Action) -> ReconcileOutcome:
    return {
        ActionStatus.EXECUTED: ReconcileOutcome.EXECUTED,
        ActionStatus.FAILED: ReconcileOutcome.FAILED,
    }.get(action.status, ReconcileOutcome.PENDING)


def action_record_error(action: Action, message: str) -> Action:
    """An error the provider gave that does not end the action (it is retried): shown as is."""
    action_touch(action_id=action.pk, error=message[:2000])
    action.refresh_from_db()
    return action
