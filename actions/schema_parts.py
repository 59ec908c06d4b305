"""The pieces the actions contract (contract.py) is made of: nullable and date-time scalars, a
closed object, and the inputs shared by several tools (an asset, a recipient, a card id)."""

from __future__ import annotations

from typing import Any

from core.schema import fullmatch_pattern

NULL_STR = {"type": ["string", "null"]}
CAIP2 = {"type": "string", "pattern": "^eip155:[1-9][0-9]{0,17}$"}
NULL_INT = {"type": ["integer", "null"]}
DATE = {"type": "string", "format": "date-time"}
NULL_DATE = {"type": ["string", "null"], "format": "date-time"}


def closed_object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


# Inputs are checked whole (core.schema.END: no trailing newline), in ASCII, and no longer
# than the column they are looked up in (Card.card_id: 100).
CARD_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 100,
    "pattern": fullmatch_pattern(r"[A-Za-z0-9_.:-]+"),
    "description": "Gnosis Pay card id; default: the physical card",
}
DECIMAL = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}  # outputs (ours, well-formed)
# CAIP-19 on eip155: a decimal chain id without leading zeros, a 20-byte hex address.
ASSET_ID_PATTERN = fullmatch_pattern(r"eip155:[1-9][0-9]{0,19}/erc20:0x[0-9a-fA-F]{40}")
ASSET = {
    "type": "string",
    "pattern": ASSET_ID_PATTERN,
    "maxLength": 88,
    "description": "CAIP-19 asset id, eip155:<chain>/erc20:<address>",
}
# A 0x address (the zero address is refused by the tool: tokens sent there are burnt) or an
# ENS name (at most 255 characters, DNS's limit).
RECIPIENT = {
    "type": "string",
    "minLength": 1,
    # Longer than an ENS name may be (255), so an over-long name gets the normaliser's reason
    # (ens_name_invalid) rather than a bare length error; still a bound on what is read.
    "maxLength": 1024,
    # Any dotted name: ENSIP-15 (not a pattern) decides which names are valid, and says why not.
    "pattern": fullmatch_pattern(r"0x[0-9a-fA-F]{40}|[^.\s]+(\.[^.\s]+)+"),
    "description": "a 0x address or an ENS name (ENSIP-15), like merchant.eth",
}
