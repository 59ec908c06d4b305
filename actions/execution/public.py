"""The execution room's face: an action's life as the other rooms, the app level and the beat use
it: create, sign or reject, submit, reconcile, expire, purge; the status reads; the kinds
registry (`kinds_register`, `kind_of`) the table of action types fills.
"""

from __future__ import annotations

from actions.execution.kinds import (
    ActionKind,
    UserOperation,
    history_types,
    kind_of,
    kinds_register,
)
from actions.execution.retention import actions_purge_retained
from actions.execution.selectors import (
    action_signer,
    action_status_for_client,
    action_status_statement,
    action_with_history,
    actions_for_user,
    actions_of_account,
    actions_stuck,
)
from actions.execution.services import (
    ActionResolutionError,
    action_create,
    action_expire_if_overdue,
    action_mark_failed,
    action_reconcile,
    action_reconcile_now,
    action_resend,
    action_status_refresh,
    action_submit,
    actions_expire_overdue,
    actions_reconcile_pending,
    swap_quote_bounded,
)
from actions.execution.signing import (
    AGENT_DISCONNECTED,
    action_reject,
    action_sign,
    authentication_options,
    on_agent_disconnected,
)
from actions.execution.transitions import (
    ReconcileOutcome,
    action_record_error,
    action_touch,
    outcome_of,
)

__all__ = [
    "AGENT_DISCONNECTED",
    "ActionKind",
    "ActionResolutionError",
    "ReconcileOutcome",
    "UserOperation",
    "action_create",
    "action_expire_if_overdue",
    "action_mark_failed",
    "action_reconcile",
    "action_reconcile_now",
    "action_record_error",
    "action_reject",
    "action_resend",
    "action_sign",
    "action_signer",
    "action_status_for_client",
    "action_status_refresh",
    "action_status_statement",
    "action_submit",
    "action_touch",
    "action_with_history",
    "actions_expire_overdue",
    "actions_for_user",
    "actions_of_account",
    "actions_purge_retained",
    "actions_reconcile_pending",
    "actions_stuck",
    "authentication_options",
    "history_types",
    "kind_of",
    "kinds_register",
    "on_agent_disconnected",
    "outcome_of",
    "swap_quote_bounded",
]
