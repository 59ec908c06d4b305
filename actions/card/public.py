"""The card room's face: the card reads, the Gnosis Pay client and session token, and the two
kinds of card action (state and limit) for the table of action types.
"""

from __future__ import annotations

from actions.card.limit import CardLimit
from actions.card.selectors import (
    card_get_for_user,
    card_state_last_executed,
    cards_for_user,
    gnosis_pay_session_token,
)
from actions.card.state import CardState, gnosis_pay_client

__all__ = [
    "CardLimit",
    "CardState",
    "card_get_for_user",
    "card_state_last_executed",
    "cards_for_user",
    "gnosis_pay_client",
    "gnosis_pay_session_token",
]
