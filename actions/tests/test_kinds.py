"""The table of action types: every type has a kind, and submission, reconciliation, signing
and the history all dispatch through it."""

from __future__ import annotations

import pytest

from actions.action_types import KINDS
from actions.card.limit import CardLimit
from actions.card.state import CardState
from actions.execution.kinds import UserOperation, history_types, kind_of, kinds_register
from actions.execution.models import ActionType
from actions.history.models import HistoryKind
from actions.permissions.follow import SpendPermissionOperation
from actions.public import ACTION_TOOLS
from actions.urls import api_urlpatterns
from mcp_adapter.task_store import TASK_TOOLS


def test_every_action_type_has_exactly_one_kind():
    assert set(KINDS) == set(ActionType.values)
    # "": no history line (a spending permission's grant or revocation moves no token).
    assert {k.history_kind for k in KINDS.values()} <= {*HistoryKind.values, ""}


def test_the_kinds_by_type():
    assert isinstance(kind_of(ActionType.TRANSFER), UserOperation)
    assert isinstance(kind_of("swap"), UserOperation)
    assert isinstance(kind_of(ActionType.CARD_FREEZE), CardState)
    assert isinstance(kind_of(ActionType.CARD_UNFREEZE), CardState)
    assert isinstance(kind_of(ActionType.CARD_LIMIT_SET), CardLimit)
    assert kind_of(ActionType.CARD_LIMIT_SET).history_kind == HistoryKind.CARD_LIMIT
    assert isinstance(kind_of(ActionType.SPEND_GRANT), SpendPermissionOperation)
    assert isinstance(kind_of(ActionType.SPEND_REVOKE), SpendPermissionOperation)


def test_the_execution_room_dispatches_through_the_table_registered_at_ready():
    """The table lives at the app level (it joins the rooms); ready() hands it to the execution
    room, which dispatches without importing the card or the permissions."""
    assert {t: kind_of(t) for t in ActionType.values} == KINDS
    assert history_types() == tuple(t for t, kind in KINDS.items() if kind.history_kind)
    kinds_register(KINDS)  # ready() again (a second test app registry): the same table is fine
    with pytest.raises(RuntimeError):
        kinds_register({**KINDS, ActionType.SWAP: CardState(tool="swap", history_kind="")})
    assert kind_of(ActionType.SWAP) == KINDS[ActionType.SWAP]


def test_every_type_names_the_tool_that_proposes_it():
    """The table is also the list of action tools: each has its API route, and the MCP adapter
    offers each as a task (it reads the table from actions.public)."""
    # A revocation has no tool: the user proposes it on their own page.
    assert ACTION_TOOLS == tuple(k.tool for k in KINDS.values() if k.tool)
    assert len(set(ACTION_TOOLS)) == len(KINDS) - 1
    routes = {str(p.pattern) for p in api_urlpatterns}
    assert {f"actions/{tool}" for tool in ACTION_TOOLS} <= routes
    assert {t for t, kind in TASK_TOOLS.items() if kind == "action"} == set(ACTION_TOOLS)
