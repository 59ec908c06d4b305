"""A cross-chain swap's second leg in plain words, in the active language: the signing page
and the e-mail sent when the bridge finishes say the same sentence."""

from __future__ import annotations

from django.utils.translation import gettext

from actions.bridges.models import BridgeLeg
from actions.execution.models import Action, ActionStatus
from core import l10n
from core.chains import chain_name


def _short_hash(value: str | None) -> str:
    return f"{value[:10]}…{value[-8:]}" if value and len(value) > 20 else (value or "")


def bridge_leg_words(action: Action, leg: BridgeLeg) -> str:
    """A cross-chain swap's second leg in plain words, in the user's language."""
    params = action.params or {}
    values = {
        "amount": l10n.format_amount(params.get("amount", "")),
        "symbol": params.get("symbol", ""),
        "to_symbol": leg.to_symbol,
        "source": chain_name(leg.from_chain_id),
        "destination": chain_name(leg.to_chain_id),
        "received": l10n.format_amount(leg.received_amount),
        "received_symbol": leg.received_symbol,
        "where": chain_name(leg.receiving_chain_id or leg.to_chain_id),
        "tx": _short_hash(leg.receiving_tx_hash),
    }
    if action.status != ActionStatus.EXECUTED:
        return (
            gettext(
                "This swap has two steps: your %(amount)s %(symbol)s leave your account on "
                "%(source)s, then a bridge delivers %(to_symbol)s to your account on "
                "%(destination)s, usually within minutes."
            )
            % values
        )
    if leg.status == "DONE" and leg.substatus == "REFUNDED":
        return (
            gettext(
                "The bridge could not deliver %(to_symbol)s on %(destination)s, so it sent your "
                "%(received)s %(received_symbol)s back to your account on %(where)s (transaction "
                "%(tx)s). The swap did not happen; only the network fee was spent."
            )
            % values
        )
    if leg.status == "DONE" and leg.substatus == "PARTIAL":
        return (
            gettext(
                "The bridge delivered a different token than the one you asked for: you received "
                "%(received)s %(received_symbol)s on %(where)s instead of %(to_symbol)s "
                "(transaction %(tx)s). It is in your account there; you can swap it if you still "
                "want %(to_symbol)s."
            )
            % values
        )
    if leg.status == "DONE":
        return (
            gettext("Received %(received)s %(received_symbol)s on %(where)s (transaction %(tx)s).")
            % values
        )
    if leg.status == "FAILED":
        return (
            gettext(
                "The bridge failed to deliver %(to_symbol)s on %(destination)s: your %(amount)s "
                "%(symbol)s left your account on %(source)s and have not arrived. Picnic support "
                "has been alerted; give them the reference below if you contact them."
            )
            % values
        )
    if leg.substatus == "CHAIN_NOT_AVAILABLE":
        return (
            gettext(
                "Step 1 done: your %(amount)s %(symbol)s left your account on %(source)s. Step 2 "
                "is waiting: %(destination)s cannot be reached right now, and the bridge delivers "
                "%(to_symbol)s there as soon as it can."
            )
            % values
        )
    return (
        gettext(
            "Step 1 done: your %(amount)s %(symbol)s left your account on %(source)s. Step 2 is "
            "waiting for the bridge to deliver %(to_symbol)s on %(destination)s."
        )
        % values
    )
