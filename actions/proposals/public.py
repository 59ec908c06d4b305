"""The proposals room's face: the entry of each action tool."""

from __future__ import annotations

from actions.proposals.services import (
    card_limit_propose,
    card_state_propose,
    swap_propose,
    transfer_propose,
)

__all__ = [
    "card_limit_propose",
    "card_state_propose",
    "swap_propose",
    "transfer_propose",
]
