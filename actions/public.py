"""actions' public face: all that the layers above it (mcp_adapter, console) use of the app.

The tool contracts, the MCP task hooks, the console's stuck-work and search providers and the
staff moves' services. The rest of the app is private to it by convention; the code stays
in its modules and is re-exported or wrapped here (core/tests/test_public_faces.py holds
the layers above to this module)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Lower

from actions import contract
from actions.accounts.models import AccountChange, AccountChangeStatus
from actions.accounts.public import account_changes_stuck
from actions.action_types import ACTION_TOOLS
from actions.bridges.public import bridge_why, bridges_waiting, leg_outcome
from actions.execution.models import ACTION_LIFECYCLE, IN_FLIGHT, Action, ActionStatus
from actions.execution.public import (
    ActionResolutionError,
    action_expire_if_overdue,
    action_mark_failed,
    action_reconcile_now,
    action_resend,
    action_with_history,
    actions_of_account,
    actions_stuck,
    kind_of,
)
from actions.permissions.models import SpendPermission, SpendPermissionStatus
from actions.presenters import action_status_payload
from actions.views import action_created_payload
from core.admin import address_forms
from core.lifecycle import Actor, transition
from evm import ens

__all__ = [
    "ACTION_TOOLS",
    "IN_FLIGHT",
    "ActionResolutionError",
    "ActionStatus",
    "account_changes_needing_attention",
    "account_changes_search",
    "action_agent_cancel",
    "action_for_task",
    "action_mark_failed",
    "action_progress_note",
    "action_reconcile_now",
    "action_resend",
    "action_sign_url",
    "action_status_payload",
    "actions_needing_attention",
    "actions_search",
    "contract",
    "spend_permissions_needing_attention",
    "spend_permissions_search",
]

# --- MCP tasks -----------------------------------------------------------------------------


def action_for_task(action_id) -> Action:
    """The action with its history, expired first if its signing window has passed (a task
    never reports `proposed` for an action nobody can sign any more)."""
    action = action_with_history(action_id=action_id)
    if action_expire_if_overdue(action=action) is not action:
        action = action_with_history(action_id=action_id)
    return action


def action_sign_url(action: Action) -> str:
    """The page where the user signs `action` with their passkey (the tool's `sign_url`)."""
    return action_created_payload(action)["sign_url"]


def action_progress_note(action: Action) -> str:
    """What an agent following a signed, submitted or broadcast action is told, by its type
    (the action-type table, `action_types.KINDS`)."""
    kind = kind_of(action.type)
    if action.status == ActionStatus.SIGNED:
        return kind.signed_note
    return kind.in_flight_note(action.status)


def action_agent_cancel(*, action_id, detail: str) -> Action:
    """The agent withdraws a proposal: proposed → rejected; IllegalTransition (its `current`
    says why) once the user signed."""
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action_id,
        to=ActionStatus.REJECTED,
        actor=Actor.agent(),
        only_from={ActionStatus.PROPOSED},
        detail=detail,
    )


# --- The support console -----------------------------------------------------------------------


def actions_needing_attention(*, now: datetime) -> tuple[tuple[QuerySet, ...], Any]:
    """Stuck in flight, failed in the last hour, or a cross-chain swap whose bridge waits too
    long or failed (each a queryset of its own, read in its own index's order); and how to say
    why one is listed."""
    failed_recently = Q(status=ActionStatus.FAILED, updated_at__gte=now - timedelta(hours=1))
    found = (
        actions_stuck(now=now),
        Action.objects.filter(failed_recently),
        # The action is executed (its source transaction); its destination leg is not done.
        Action.objects.filter(pk__in=bridges_waiting(now=now)),
    )

    def why(action: Action) -> str:
        if action.status == ActionStatus.FAILED:
            return "failed in the last hour"
        return bridge_why(action, now) or "stuck in flight"

    return tuple(branch.select_related("bridge_leg") for branch in found), why


def listed_bridge_outcome(action: Action) -> str:
    """An executed swap's bridge outcome when its leg was read with it (the needs-attention
    list) and is not a plain delivery: "refunded", "partial", "failed", "pending"; else ""."""
    leg = Action.bridge_leg.related.get_cached_value(action, default=None)
    if leg is None or action.status != ActionStatus.EXECUTED:
        return ""
    outcome = leg_outcome(leg)
    return "" if outcome == "completed" else outcome


def _json_text(key: str) -> Cast:
    return Cast(KeyTextTransform(key, "params"), TextField())


def actions_search(*, shape: str, value: Any, term: str) -> list[tuple[str, QuerySet]]:
    """Exact, indexed lookups for a search term of this shape (core.admin.search_term_kind):
    (what was tried, the actions it finds)."""
    if shape == "uuid":
        return [("action id", Action.objects.filter(pk=value))]
    if shape == "hash":
        forms = [value, term] if term != value else [value]
        return [
            ("userOpHash", Action.objects.filter(user_op_hash__in=forms)),
            ("tx hash", Action.objects.filter(tx_hash__in=forms)),
            (
                "bridge receiving tx hash",
                Action.objects.filter(bridge_leg__receiving_tx_hash__in=forms),
            ),
        ]
    if shape == "address":
        # params->>'to' as the index action_params_to has it (params__to would compare jsonb).
        # The text cast, a no-op for PostgreSQL, keeps Django's JSON-key lookups (which wrap the
        # values in JSON() on SQLite, "malformed JSON" for an address) off the comparison.
        recipient = Action.objects.alias(param_to=_json_text("to"))
        return [
            ("smart account", actions_of_account(Action.objects.all(), value)),
            ("recipient", recipient.filter(param_to__in=address_forms(value))),
        ]
    if shape == "text" and "." in term:
        try:
            # Stored ENSIP-15 normalised (proposals.checks.recipient_of): "Alice.ETH" finds alice.eth.
            name = ens.normalize(term)
        except ens.EnsNameInvalid:
            return []
        named = Action.objects.alias(param_ens=_json_text("ens"))
        return [("ENS name", named.filter(param_ens=name))]
    return []


# --- Account changes (owners and recovery): staff see them, never move them ------------------


def account_changes_needing_attention(*, now: datetime) -> tuple[tuple[QuerySet, ...], Any]:
    """Stuck signed/submitted changes (and changes some chain still misses), recoveries
    waiting past readyAt, and failures in the last hour. The console lists them; no staff move applies to them (console/moves.py)."""
    failed_recently = Q(status=AccountChangeStatus.FAILED, updated_at__gte=now - timedelta(hours=1))
    found = account_changes_stuck(now=now) | AccountChange.objects.filter(failed_recently)

    def why(change: AccountChange) -> str:
        if change.status == AccountChangeStatus.FAILED:
            return "failed in the last hour"
        if change.status == AccountChangeStatus.WAITING:
            return "recovery waiting past its delay"
        if change.behind_since is not None:
            missing = [str(op["chain_id"]) for op in change.ops if not op["done"]]
            return f"applied on some chains, missing on {', '.join(missing)} (retrying)"
        return "stuck in flight"

    return (found,), why


def account_changes_search(*, shape: str, value: Any, term: str) -> list[tuple[str, QuerySet]]:
    if shape == "uuid":
        return [("account change id", AccountChange.objects.filter(pk=value))]
    if shape == "address":
        return [("account", AccountChange.objects.filter(account__in=address_forms(value)))]
    return []


# --- Spending permissions: staff see them, never move them -----------------------------------


def spend_permissions_needing_attention(*, now: datetime) -> tuple[tuple[QuerySet, ...], Any]:
    """Grants that failed in the last hour, and revocations waiting more than a day (the
    session key is destroyed; the on-chain revocation was not signed or not included)."""
    found = SpendPermission.objects.filter(
        Q(status=SpendPermissionStatus.FAILED, updated_at__gte=now - timedelta(hours=1))
        | Q(status=SpendPermissionStatus.REVOKING, updated_at__lt=now - timedelta(days=1))
    )

    def why(permission: SpendPermission) -> str:
        if permission.status == SpendPermissionStatus.FAILED:
            return "grant failed in the last hour"
        return "revocation not on chain after a day (its key is destroyed)"

    return (found,), why


def spend_permissions_search(*, shape: str, value: Any, term: str) -> list[tuple[str, QuerySet]]:
    if shape == "uuid":
        return [("spending permission id", SpendPermission.objects.filter(pk=value))]
    if shape == "hash":
        return [("on-chain permission id", SpendPermission.objects.filter(permission_id=term))]
    if shape == "text" and term:
        # LOWER(name) as the index spend_permission_name_lower has it.
        named = SpendPermission.objects.alias(name_lower=Lower("name"))
        return [("permission name", named.filter(name_lower=term.lower()))]
    if shape == "address":
        return [
            (
                "session key",
                SpendPermission.objects.filter(session_key_address__in=address_forms(value)),
            )
        ]
    return []
