"""The table of action types: every type has a kind, and submission, reconciliation, signing
and the history all dispatch through it."""

from __future__ import annotations

from actions.models import ActionType, HistoryKind
from actions.services.kinds import KINDS, CardLimit, CardState, UserOperation, kind_of


def test_every_action_type_has_exactly_one_kind():
    assert set(KINDS) == set(ActionType.values)
    assert {k.history_kind for k in KINDS.values()} <= set(HistoryKind.values)


def test_the_kinds_by_type():
    assert isinstance(kind_of(ActionType.TRANSFER), UserOperation)
    assert isinstance(kind_of("swap"), UserOperation)
    assert isinstance(kind_of(ActionType.CARD_FREEZE), CardState)
    assert isinstance(kind_of(ActionType.CARD_UNFREEZE), CardState)
    assert isinstance(kind_of(ActionType.CARD_LIMIT_SET), CardLimit)
    assert kind_of(ActionType.CARD_LIMIT_SET).history_kind == HistoryKind.CARD_LIMIT
