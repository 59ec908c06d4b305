"""Scopes in the words the consent page uses: what an agent may read, and what it may propose
(a proposal still needs the user's passkey to happen)."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

READ = "read"
ACT = "act"


@dataclass(frozen=True)
class ScopeWords:
    name: str
    kind: str  # READ or ACT
    text: str


_WORDS = {
    "read:balances": (READ, _("The token balances of your smart accounts")),
    "read:accounts": (READ, _("Your smart accounts (their addresses)")),
    "read:actions": (READ, _("The status of the wallet actions it proposed")),
    "read:card": (READ, _("Your Picnic card: its state, balance and daily limit")),
    "read:transactions": (
        READ,
        _("Your transaction history: transfers, swaps, ramps, card purchases"),
    ),
    "read:profile": (
        READ,
        _("Your profile: e-mail, fiat ramps and their verification status, cards"),
    ),
    "agent:dm_read": (READ, _("What happened to DMs sent through your workspaces")),
    "operations:read": (READ, _("Your generation operations")),
    "write:actions": (
        ACT,
        _(
            "Propose wallet actions (transfers, swaps, freezing the card, changing its limit). "
            "Nothing moves until you open the proposal and sign it with your passkey."
        ),
    ),
    "agent:dm_write": (ACT, _("Send and cancel DMs through your workspaces' social accounts")),
    "operations:write": (ACT, _("Start generation operations, spending your credits")),
}


# write:actions for an agent holding an active spending permission: its grants move money
# without a prompt, so "nothing moves until you sign" would be false.
WRITE_ACTIONS_WITH_PERMISSIONS = _(
    "Propose wallet actions (transfers, swaps, freezing the card, changing its limit). "
    "Within its active spending permissions (below) it sends with no prompt; anything else "
    "waits until you sign it with your passkey."
)


def scope_words(scopes) -> list[ScopeWords]:
    """Each scope in plain words, reads first, in the order above (the wallet first); a scope
    without words shows its name."""
    found = [ScopeWords(s, *_WORDS.get(s, (ACT, s))) for s in dict.fromkeys(scopes)]
    order = list(_WORDS)
    return sorted(
        found, key=lambda w: (w.kind != READ, order.index(w.name) if w.name in order else 99)
    )
