"""Why an agent's spending permission did not cover a transfer or a swap, which then falls back
to the passkey. Each reason has two readers: the agent gets `text`, in English, as the tool's
`permission_note` (its published wording); the user's signing page gets `code` and `params`,
stored with the action (`params["permission_reasons"]`) and translated when the page is drawn
(actions/signing_page/facts.py), so the sentence follows the user's language, not the agent's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# What the signing page knows how to say; a code it does not know shows the English note.
CODES = frozenset(
    {
        "revoked",  # {name}
        "expired",  # {name}
        "revoking",  # {name}
        "not_granted",  # {name}
        "not_started",  # {name, starts_at (RFC 3339)}
        "recipient",  # {name, recipient}
        "over_allowance",  # {name, period, amount, symbol}
        "allowance_unreadable",  # {name, chain}
        "key_unavailable",  # {name}
        "chain_refused",  # {name}
        "cross_chain",  # {}
        "wrong_pair",  # {name, symbol, to_symbol}
        "route",  # {name, tool}
        "route_value",  # {name}
    }
)


@dataclass(frozen=True)
class Reason:
    code: str
    text: str  # English, for the agent
    params: dict[str, str] = field(default_factory=dict)  # JSON strings, for the page


def note_text(reasons: Sequence[Reason]) -> str:
    """The agent's `permission_note`: every reason, in English ("" when there is none)."""
    return "; ".join(reason.text for reason in reasons)


def stored(reasons: Sequence[Reason]) -> list[dict[str, str]]:
    """What the action keeps for its signing page: one {"code", ...params} per reason."""
    return [{"code": reason.code, **reason.params} for reason in reasons]
