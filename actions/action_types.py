"""The table of action types: each type's kind (how it is signed, sent and reconciled, from
its room), the tool that proposes it and the line it makes in the transaction history. It sits
at the app level because it joins the rooms; `ActionsConfig.ready()` registers it with the
execution room, which dispatches through it (execution/kinds.py). A new type is a row here."""

from __future__ import annotations

from actions.card.public import CardLimit, CardState
from actions.execution.models import ActionType
from actions.execution.public import ActionKind, UserOperation
from actions.history.models import HistoryKind
from actions.permissions.public import SpendPermissionOperation

KINDS: dict[str, ActionKind] = {
    ActionType.TRANSFER: UserOperation(tool="transfer", history_kind=HistoryKind.TRANSFER),
    ActionType.SWAP: UserOperation(tool="swap", history_kind=HistoryKind.SWAP),
    ActionType.CARD_FREEZE: CardState(tool="card_freeze", history_kind=HistoryKind.CARD_FREEZE),
    ActionType.CARD_UNFREEZE: CardState(
        tool="card_unfreeze", history_kind=HistoryKind.CARD_UNFREEZE
    ),
    ActionType.CARD_LIMIT_SET: CardLimit(tool="card_limit", history_kind=HistoryKind.CARD_LIMIT),
    ActionType.SPEND_GRANT: SpendPermissionOperation(
        tool="request_spend_permission", history_kind=""
    ),
    # Proposed from the user's own page (or by disconnecting the agent), not by a tool.
    ActionType.SPEND_REVOKE: SpendPermissionOperation(tool="", history_kind=""),
}
# The tools that propose an action, in the table's order.
ACTION_TOOLS: tuple[str, ...] = tuple(kind.tool for kind in KINDS.values() if kind.tool)
# The action types that make a line in the transaction history once executed.
HISTORY_TYPES: tuple[str, ...] = tuple(t for t, kind in KINDS.items() if kind.history_kind)
