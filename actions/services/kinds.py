"""One table of action types, like healthchecks' `Channel.transport`: what carries an action
out once it is signed (how the signature is stored, how it is submitted and reconciled) and
the line it makes in the transaction history. A new type is a row here, not an `if` elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from actions.models import Action, ActionType, HistoryKind, SmartAccount
from actions.services import card_limit, card_state, user_operations
from actions.services.transitions import ReconcileOutcome
from core.lifecycle import Actor
from evm.bundler import BundlerClient


@dataclass(frozen=True)
class ActionKind:
    """What every kind answers. `history_kind` is the history line of an executed action."""

    history_kind: str

    def signed_updates(self, action: Action, *, account: SmartAccount, signature: str) -> dict:
        """The fields that store the packed passkey assertion (`signed` is set with them)."""
        raise NotImplementedError

    def submit(self, *, action_id, client: BundlerClient | None = None) -> Action:
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

    def signed_updates(self, action, *, account, signature):
        return user_operations.user_op_signed_updates(action=action, signature=signature)

    def submit(self, *, action_id, client=None):
        return user_operations.user_op_submit(action_id=action_id, client=client)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return user_operations.user_op_reconcile(
            action=action, actor=actor, client=client, note=note, force_resend=force_resend
        )


class CardState(ActionKind):
    """A Gnosis Pay request, signed in with SIWE for the card's Safe: no transaction."""

    def signed_updates(self, action, *, account, signature):
        return card_state.card_action_signed_updates(
            action=action, account=account, signature=signature
        )

    def submit(self, *, action_id, client=None):
        return card_state.card_action_submit(action_id=action_id)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return card_state.card_action_reconcile(action=action)


class CardLimit(ActionKind):
    """A Zodiac module transaction, relayed, held by the card Safe's Delay for its cooldown."""

    def signed_updates(self, action, *, account, signature):
        return card_limit.card_limit_signed_updates(action=action, signature=signature)

    def submit(self, *, action_id, client=None):
        return card_limit.card_limit_submit(action_id=action_id)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return card_limit.card_limit_reconcile(action=action, actor=actor)


KINDS: dict[str, ActionKind] = {
    ActionType.TRANSFER: UserOperation(history_kind=HistoryKind.TRANSFER),
    ActionType.SWAP: UserOperation(history_kind=HistoryKind.SWAP),
    ActionType.CARD_FREEZE: CardState(history_kind=HistoryKind.CARD_FREEZE),
    ActionType.CARD_UNFREEZE: CardState(history_kind=HistoryKind.CARD_UNFREEZE),
    ActionType.CARD_LIMIT_SET: CardLimit(history_kind=HistoryKind.CARD_LIMIT),
}


def kind_of(action_type: str) -> ActionKind:
    return KINDS[action_type]
