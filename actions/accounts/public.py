"""The accounts room's face: what the other rooms, the app level and the routes use of
accounts and owners (who owns what, passkeys, owner changes and their delivery, recovery, the
user's preferences and the pages). Everything else in the room is private to it.
"""

from __future__ import annotations

from actions.accounts import device_views, pages
from actions.accounts.change_delivery import account_change_submit
from actions.accounts.owner_changes import count_use, passkey_request, verify_signer
from actions.accounts.passkeys import smart_accounts_cover_chains
from actions.accounts.preferences import connect_login_receiver, in_users_words
from actions.accounts.recovery import account_changes_process
from actions.accounts.selectors import (
    account_changes_stuck,
    approving_passkey_count,
    passkeys_for_user,
    smart_accounts_for_user,
    tokens_on_chains,
)

__all__ = [
    "account_change_submit",
    "account_changes_process",
    "account_changes_stuck",
    "approving_passkey_count",
    "connect_login_receiver",
    "count_use",
    "device_views",
    "in_users_words",
    "pages",
    "passkey_request",
    "passkeys_for_user",
    "smart_accounts_cover_chains",
    "smart_accounts_for_user",
    "tokens_on_chains",
    "verify_signer",
]
