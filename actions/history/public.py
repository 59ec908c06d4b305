"""The history room's face: the transaction history page and its sync, for the read tool and
the beat.
"""

from __future__ import annotations

from actions.history.selectors import encode_cursor, history_page
from actions.history.services import card_purchases_sync_signed_in, history_sync

__all__ = [
    "card_purchases_sync_signed_in",
    "encode_cursor",
    "history_page",
    "history_sync",
]
