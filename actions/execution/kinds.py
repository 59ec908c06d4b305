"""What every kind of action answers, like healthchecks' `Channel.transport`: the tool that
proposes it, what carries it out once it is signed (how the signature is stored, how it is
submitted and reconciled), what the agent is told while it is under way, and the line it makes
in the transaction history. The kinds live in their rooms (a user operation here, the card's in
card/, a spending permission's in permissions/); the table of types that joins them is
actions/action_types.py, registered here from `ActionsConfig.ready()`, so this room dispatches
to the others without importing them. A new type is a row there, not an `if` elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from actions.accounts.models import SmartAccount
from actions.execution import user_operations
from actions.execution.models import Action
from actions.execution.transitions import ReconcileOutcome
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


# The table of action types, filled once from ActionsConfig.ready() (actions/action_types.py).
_KINDS: dict[str, ActionKind] = {}


def kinds_register(table: Mapping[str, ActionKind]) -> None:
    """Take the table of action types; the same table again is a no-op (ready() may run twice
    in a test run), a different one is a bug."""
    if _KINDS and dict(table) != _KINDS:
        raise RuntimeError("the table of action types is registered once")
    _KINDS.update(table)


def kind_of(action_type: str) -> ActionKind:
    return _KINDS[action_type]


def history_types() -> tuple[str, ...]:
    """The action types that make a line in the transaction history once executed."""
    return tuple(t for t, kind in _KINDS.items() if kind.history_kind)
