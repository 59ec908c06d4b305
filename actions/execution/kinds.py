"""One table of action types, like healthchecks' `Channel.transport`: the tool that proposes
it, what carries an action out once it is signed (how the signature is stored, how it is
submitted and reconciled), what the agent is told while it is under way, and the line it makes
in the transaction history. A new type is a row here, not an `if` elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from actions.accounts.models import SmartAccount
from actions.card import limit as card_limit
from actions.card import state as card_state
from actions.execution import user_operations
from actions.execution.models import Action, ActionType
from actions.execution.transitions import ReconcileOutcome
from actions.history.models import HistoryKind
from actions.permissions.follow import spend_permissions_follow_action
from core.lifecycle import Actor
from evm.bundler import BundlerClient


@dataclass(frozen=True)
class ActionKind:
    """What every kind answers. `tool` is the MCP tool (and API route `actions/<tool>`) that
    proposes it; `history_kind` is the history line of an executed action."""

    tool: str
    history_kind: str
    # What an agent following the action (an MCP task) is told once the user signed.
    signed_note: ClassVar[str] = ""

    def in_flight_note(self, status: str) -> str:
        """What the agent is told while it is submitted or broadcast."""
        raise NotImplementedError

    def signed_updates(self, action: Action, *, account: SmartAccount, signature: str) -> dict:
        """The fields that store the packed passkey assertion (`signed` is set with them)."""
        raise NotImplementedError

    def send(self, *, action_id, client: BundlerClient | None = None) -> Action:
        """signed → submitted → sent; it records a transient error and stays `submitted`."""
        raise NotImplementedError

    def reconcile(
        self,
        action: Action,
        *,
        actor: Actor,
        client: BundlerClient | None = None,
        note: str = "",
        force_resend: bool = False,
    ) -> ReconcileOutcome:
        """Advance a submitted/broadcast action from what the outside world says."""
        raise NotImplementedError


class UserOperation(ActionKind):
    """An ERC-4337 user operation of the passkey account, through the bundler."""

    signed_note = "Signed by the user; submitting the user operation to the bundler."

    def in_flight_note(self, status):
        return (
            f"{status.capitalize()}: waiting for the bundler to include the user operation "
            "and for its receipt."
        )

    def signed_updates(self, action, *, account, signature):
        return user_operations.user_op_signed_updates(action=action, signature=signature)

    def send(self, *, action_id, client=None):
        return user_operations.user_op_submit(action_id=action_id, client=client)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return user_operations.user_op_reconcile(
            action=action, actor=actor, client=client, note=note, force_resend=force_resend
        )


class SpendPermissionOperation(UserOperation):
    """A user operation of the passkey account on itself that grants or revokes a spending
    permission: submitted and reconciled as any user operation, then the permission follows
    (permissions/follow.py). It makes no line in the transaction history (no tokens move)."""

    signed_note = "Signed by the user; submitting the permission's user operation."

    def send(self, *, action_id, client=None):
        action = user_operations.user_op_submit(action_id=action_id, client=client)
        spend_permissions_follow_action(action)
        return action

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        outcome = user_operations.user_op_reconcile(
            action=action, actor=actor, client=client, note=note, force_resend=force_resend
        )
        spend_permissions_follow_action(Action.objects.get(pk=action.pk))
        return outcome


class CardState(ActionKind):
    """A Gnosis Pay request, signed in with SIWE for the card's Safe: no transaction."""

    signed_note = "Signed by the user; sending the request to Gnosis Pay."

    def in_flight_note(self, status):
        return "Sent to Gnosis Pay; waiting for it to confirm the card's state."

    def signed_updates(self, action, *, account, signature):
        return card_state.card_action_signed_updates(
            action=action, account=account, signature=signature
        )

    def send(self, *, action_id, client=None):
        return card_state.card_action_submit(action_id=action_id)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return card_state.card_action_reconcile(action=action)


class CardLimit(ActionKind):
    """A Zodiac module transaction, relayed, held by the card Safe's Delay for its cooldown."""

    signed_note = "Signed by the user; relaying the change to the card's delay module."

    def in_flight_note(self, status):
        return (
            "Queued in the card's delay module; waiting for its cooldown to pass before the "
            "new limit takes effect."
        )

    def signed_updates(self, action, *, account, signature):
        return card_limit.card_limit_signed_updates(action=action, signature=signature)

    def send(self, *, action_id, client=None):
        return card_limit.card_limit_submit(action_id=action_id)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return card_limit.card_limit_reconcile(action=action, actor=actor)


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


def kind_of(action_type: str) -> ActionKind:
    return KINDS[action_type]
