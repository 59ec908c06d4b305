"""The spending permissions room's face: a request for a permission, spending under one and why
it did not cover a spend, the agent's permissions, the sweep, the receivers of the core's
agent signals, the permission's kind of action and the Spending permissions page.
"""

from __future__ import annotations

from actions.permissions import views
from actions.permissions.follow import SpendPermissionOperation, spend_permissions_sweep
from actions.permissions.grants import spend_permission_request
from actions.permissions.reasons import CODES, Reason, note_text, stored
from actions.permissions.receivers import (
    on_agent_disconnected,
    on_agents_listed,
    on_user_deactivated,
)
from actions.permissions.selectors import spend_permissions_for_agent
from actions.permissions.spending import (
    NotCovered,
    permission_for_swap,
    permission_for_transfer,
    swap_under_permission,
    transfer_under_permission,
)

__all__ = [
    "CODES",
    "NotCovered",
    "Reason",
    "SpendPermissionOperation",
    "note_text",
    "on_agent_disconnected",
    "on_agents_listed",
    "on_user_deactivated",
    "permission_for_swap",
    "permission_for_transfer",
    "spend_permission_request",
    "spend_permissions_for_agent",
    "spend_permissions_sweep",
    "stored",
    "swap_under_permission",
    "transfer_under_permission",
    "views",
]
