"""The bridges room's face: a cross-chain swap's destination leg as the other rooms, the pages
and the beat see it (open a leg, its outcome and words, the legs waiting).
"""

from __future__ import annotations

from actions.bridges.services import (
    OUTCOMES,
    action_outcome,
    bridge_leg_of,
    bridge_leg_open,
    bridge_why,
    bridges_reconcile_pending,
    bridges_waiting,
    leg_detail,
    leg_open,
    leg_outcome,
)
from actions.bridges.words import bridge_leg_words

__all__ = [
    "OUTCOMES",
    "action_outcome",
    "bridge_leg_of",
    "bridge_leg_open",
    "bridge_leg_words",
    "bridge_why",
    "bridges_reconcile_pending",
    "bridges_waiting",
    "leg_detail",
    "leg_open",
    "leg_outcome",
]
