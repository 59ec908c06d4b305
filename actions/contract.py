"""The actions API contract: the JSON Schemas of each tool's input and output, written from
the seeds. The DRF views validate their input against these (core.api.ApiView) and the MCP
adapter publishes the same dicts (mcp_adapter.tools), so the two cannot drift."""

from __future__ import annotations

from actions.schema_parts import (
    ASSET,
    CAIP2,
    CARD_ID,
    DATE,
    DECIMAL,
    NULL_DATE,
    NULL_INT,
    NULL_STR,
    RECIPIENT,
    closed_object,
)
from core.schema import AMOUNT, date_time, fullmatch_pattern

ACTION_TYPES = [
    "transfer",
    "swap",
    "cardFreeze",
    "cardUnfreeze",
    "cardLimitSet",
    "spendGrant",
    "spendRevoke",
]
ACTION_STATUSES = [
    "proposed",
    "signed",
    "submitted",
    "broadcast",
    "executed",
    "failed",
    "expired",
    "rejected",
]

ACTION_OUTCOMES = ["pending", "completed", "refunded", "partial", "failed", "expired", "rejected"]


ACTION_STATUS_SCHEMA = closed_object(
    {
        "action_id": {"type": "string"},
        "type": {"type": "string", "enum": ACTION_TYPES},
        "status": {"type": "string", "enum": ACTION_STATUSES},
        "summary": {"type": "string"},
        "chain_id": {"type": "integer"},
        "smart_account": {"type": "string"},
        "tx_hash": NULL_STR,
        "user_op_hash": NULL_STR,
        "block_number": NULL_INT,
        "error": NULL_STR,
        "created_at": DATE,
        "expires_at": DATE,
        "signed_at": NULL_DATE,
        "broadcast_at": NULL_DATE,
        "executed_at": NULL_DATE,
        "status_history": {
            "type": "array",
            "items": closed_object(
                {
                    "status": {"type": "string", "enum": ACTION_STATUSES},
                    "timestamp": DATE,
                    "detail": NULL_STR,
                },
                ["status", "timestamp", "detail"],
            ),
        },
        # Beyond the seed: the spending permission whose session key signed it (its name and
        # get_spend_permissions' permission_id), null when the user's passkey did.
        "signed_by_permission": NULL_STR,
        "signed_by_permission_id": NULL_STR,
        # Beyond the seed, whose enum stays: what happened (docs/decisions/0006-action-outcome.md).
        # A refunded cross-chain swap is `executed` (its source transaction) and `refunded`.
        "outcome": {"type": "string", "enum": ACTION_OUTCOMES},
        "outcome_detail": NULL_STR,
    },
    [
        "action_id",
        "type",
        "status",
        "summary",
        "chain_id",
        "smart_account",
        "tx_hash",
        "user_op_hash",
        "block_number",
        "error",
        "created_at",
        "expires_at",
        "signed_at",
        "broadcast_at",
        "executed_at",
        "status_history",
        "signed_by_permission",
        "signed_by_permission_id",
        "outcome",
        "outcome_detail",
    ],
)

# What every action tool answers: where the user signs, and what to subscribe to. A transfer
# signed under a spending permission is already `signed` (or further) with no sign_url, and
# says which permission signed it; one that fell back to the passkey says why
# (permission_note).
ACTION_CREATED_SCHEMA = closed_object(
    {
        "action_id": {"type": "string"},
        "type": {"type": "string", "enum": ACTION_TYPES},
        "status": {
            "type": "string",
            "enum": ["proposed", "signed", "submitted", "broadcast", "executed", "failed"],
        },
        "summary": {"type": "string"},
        "sign_url": NULL_STR,
        "resource_uri": {"type": "string", "pattern": "^picnic://action/"},
        "user_op_hash": NULL_STR,
        "expires_at": DATE,
        "signed_by_permission": NULL_STR,
        "permission_note": NULL_STR,
    },
    [
        "action_id",
        "type",
        "status",
        "summary",
        "sign_url",
        "resource_uri",
        "user_op_hash",
        "expires_at",
    ],
)

SMART_ACCOUNT = {
    "type": "object",
    "properties": {
        "address": {"type": "string"},
        "chainId": {"type": "integer"},
        "caip2": CAIP2,  # the chain, "eip155:<chainId>"
        "accountId": {"type": "string"},  # CAIP-10: "eip155:<chainId>:<address>"
        "accountType": {"type": "string", "enum": ["picnic", "gnosisPay"]},
        "entryPointVersion": {"type": "string"},
        "owner": {"type": "string"},
    },
    "required": ["address", "chainId", "caip2", "accountId", "accountType"],
    "additionalProperties": False,
}
SMART_ACCOUNTS_SCHEMA = closed_object(
    {"smartAccounts": {"type": "array", "items": SMART_ACCOUNT}}, ["smartAccounts"]
)
FIAT_VALUES = {
    "type": ["object", "null"],
    "properties": {c: DECIMAL for c in ("USD", "EUR", "BRL")},
    "required": ["USD", "EUR", "BRL"],
    "additionalProperties": False,
}
_CARD_BALANCE = closed_object(
    {
        "currency": {"type": "string"},
        "assetId": {"type": "string"},
        "amount": DECIMAL,
        "units": {"type": "string"},
    },
    ["currency", "assetId", "amount", "units"],
)
# A card as both get_card and get_profile describe it.
CARD_SUMMARY = {
    "cardId": {"type": "string"},
    "last4": {"type": "string"},
    "virtual": {"type": "boolean"},
    "physicalCardId": NULL_STR,
    "safeAddress": {"type": "string"},
    "chainId": {"type": "integer"},
    "state": {"type": "string", "enum": ["active", "frozen", "unknown"]},
    "stateConfirmedAt": NULL_DATE,
}
KYC_STATUSES = ["none", "pending", "approved", "rejected"]
_RAMP = closed_object(
    {
        "provider": {"type": "string", "enum": ["avenia", "monerium"]},
        "providerName": {"type": "string"},
        "accountId": NULL_STR,
        "kyc": closed_object(
            {
                "status": {"type": "string", "enum": KYC_STATUSES},
                "providerStatus": NULL_STR,
                "checkedAt": NULL_DATE,
                "error": NULL_STR,
            },
            ["status", "providerStatus", "checkedAt", "error"],
        ),
    },
    ["provider", "providerName", "accountId", "kyc"],
)
PROFILE_SCHEMA = closed_object(
    {
        "userId": {"type": "string"},
        "email": NULL_STR,
        "ramps": closed_object({"BRL": _RAMP, "EUR": _RAMP}, ["BRL", "EUR"]),
        "cards": {"type": "array", "items": closed_object(CARD_SUMMARY, list(CARD_SUMMARY))},
    },
    ["userId", "email", "ramps", "cards"],
)
_FLOW = closed_object(
    {
        "direction": {"type": "string", "enum": ["in", "out", "self"]},
        "account": NULL_STR,
        "counterparty": NULL_STR,
        "assetId": NULL_STR,
        "symbol": NULL_STR,
        "formattedAmount": DECIMAL,
        "units": {"type": ["string", "null"], "pattern": "^[0-9]+$"},
    },
    ["direction", "account", "counterparty", "assetId", "symbol", "formattedAmount", "units"],
)
_CURRENCY = closed_object(
    {"code": NULL_STR, "symbol": NULL_STR, "name": NULL_STR}, ["code", "symbol", "name"]
)
HISTORY_TYPES = [
    "transfer",
    "swap",
    "ramp",
    "investment",
    "cardPurchase",
    "cardFreeze",
    "cardUnfreeze",
    "cardLimitSet",
]
_TRANSACTION = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string", "enum": HISTORY_TYPES},
        "timestamp": DATE,
        "status": {"type": "string", "enum": ["pending", "confirmed"]},
        "actionId": NULL_STR,
        "flows": {"type": "array", "items": _FLOW},
        "receipts": {
            "type": "array",
            "items": closed_object(
                {"chainId": {"type": "integer"}, "caip2": CAIP2, "txHash": {"type": "string"}},
                ["chainId", "caip2", "txHash"],
            ),
        },
        "swap": closed_object(
            {
                "fromAssetId": NULL_STR,
                "toAssetId": NULL_STR,
                "fromAmount": NULL_STR,
                "toAmountQuoted": NULL_STR,
                "toAmountMin": NULL_STR,
                "toAmountReceived": NULL_STR,
                "provider": NULL_STR,
                "slippagePercent": NULL_STR,
                "crossChain": {"type": "boolean"},
            },
            ["fromAssetId", "toAssetId", "fromAmount", "toAmountReceived", "provider"],
        ),
        "ramp": closed_object(
            {
                "provider": {"type": "string"},
                "direction": {"type": "string", "enum": ["onramp", "offramp"]},
                "fiatCurrency": NULL_STR,
                "amount": DECIMAL,
                "assetId": {"type": "string"},
            },
            ["provider", "direction", "fiatCurrency", "amount", "assetId"],
        ),
        "investment": closed_object(
            {
                "direction": {"type": "string", "enum": ["deposit", "withdraw"]},
                "vault": {"type": "string"},
                "vaultAssetId": {"type": "string"},
                "shares": DECIMAL,
                "assetId": {"type": "string"},
                "assets": {"anyOf": [DECIMAL, {"type": "null"}]},
            },
            ["direction", "vault", "vaultAssetId", "shares", "assetId", "assets"],
        ),
        "cardPurchase": closed_object(
            {
                "cardId": {"type": "string"},
                "last4": {"type": "string"},
                "kind": {"type": "string"},
                "status": {"type": "string"},
                "isPending": {"type": "boolean"},
                "clearedAt": NULL_DATE,
                "merchant": closed_object(
                    {"name": NULL_STR, "city": NULL_STR, "country": NULL_STR},
                    ["name", "city", "country"],
                ),
                "mcc": {"type": "string"},
                "billingAmount": DECIMAL,
                "billingCurrency": _CURRENCY,
                "transactionAmount": DECIMAL,
                "transactionCurrency": _CURRENCY,
                "transactionType": NULL_STR,
            },
            ["cardId", "merchant", "mcc", "billingAmount", "billingCurrency", "kind", "status"],
        ),
        "card": {
            "type": "object",
            "properties": {
                "cardId": NULL_STR,
                "last4": NULL_STR,
                "dailyLimit": NULL_STR,
                "assetId": NULL_STR,
            },
            "required": ["cardId", "last4"],
            "additionalProperties": False,
        },
    },
    "required": ["id", "type", "timestamp", "status", "actionId", "flows", "receipts"],
    "additionalProperties": False,
}
_SOURCE_ERROR = {"error": NULL_STR}
# One chain's line in a read tool's `chains`: every configured chain, with its error (a chain
# that could not be read: which and why) or null.
_CHAIN_LINE = {
    "chainId": {"type": "integer"},
    "caip2": CAIP2,
    "name": {"type": "string"},
    **_SOURCE_ERROR,
}
TRANSACTIONS_SCHEMA = closed_object(
    {
        "transactions": {"type": "array", "items": _TRANSACTION},
        "nextCursor": NULL_STR,
        "sync": {
            "type": ["object", "null"],
            "properties": {
                # The card's chain (the field from when there was one chain).
                "chain": closed_object(
                    {"chainId": {"type": "integer"}, "syncedToBlock": NULL_INT, **_SOURCE_ERROR},
                    ["chainId", "syncedToBlock", "error"],
                ),
                "chains": {
                    "type": "array",
                    "items": closed_object(
                        {**_CHAIN_LINE, "syncedToBlock": NULL_INT},
                        ["chainId", "caip2", "name", "syncedToBlock", "error"],
                    ),
                },
                "gnosisPay": closed_object(
                    {"syncedAt": NULL_DATE, **_SOURCE_ERROR}, ["syncedAt", "error"]
                ),
            },
            "required": ["chain", "chains", "gnosisPay"],
            "additionalProperties": False,
        },
    },
    ["transactions", "nextCursor", "sync"],
)
CARD_SCHEMA = closed_object(
    {
        **CARD_SUMMARY,
        "balances": {"type": "array", "items": _CARD_BALANCE},
        "allowance": {
            "type": ["object", "null"],
            "properties": {
                "currency": NULL_STR,
                "assetId": NULL_STR,
                "dailyLimit": DECIMAL,
                "remaining": DECIMAL,
                "period": closed_object(
                    {"seconds": {"type": "integer"}, "resetsAt": NULL_DATE}, ["seconds", "resetsAt"]
                ),
                "queuedChanges": {"type": "integer", "minimum": 0},
                "cooldownSeconds": {"type": "integer"},
            },
            "required": [
                "currency",
                "assetId",
                "dailyLimit",
                "remaining",
                "period",
                "queuedChanges",
                "cooldownSeconds",
            ],
            "additionalProperties": False,
        },
    },
    [
        "cardId",
        "last4",
        "virtual",
        "physicalCardId",
        "safeAddress",
        "chainId",
        "state",
        "stateConfirmedAt",
        "balances",
        "allowance",
    ],
)
BALANCES_SCHEMA = closed_object(
    {
        "balances": {
            "type": "array",
            "items": closed_object(
                {
                    "account": {"type": "string"},
                    "accountType": {"type": "string", "enum": ["picnic", "gnosisPay"]},
                    "chainId": {"type": "integer"},
                    "caip2": CAIP2,
                    "assetId": {"type": "string"},
                    "contractAddress": {"type": "string"},
                    "symbol": {"type": "string"},
                    "decimals": {"type": "integer"},
                    "amount": DECIMAL,
                    "units": {"type": "string", "pattern": "^[0-9]+$"},
                    "fiat": FIAT_VALUES,
                },
                [
                    "account",
                    "accountType",
                    "chainId",
                    "caip2",
                    "assetId",
                    "contractAddress",
                    "symbol",
                    "decimals",
                    "amount",
                    "units",
                    "fiat",
                ],
            ),
        },
        "fiatAvailable": {"type": "boolean"},
        "fiatError": NULL_STR,
        # Every configured chain: error null when read, else which chain failed and why (its
        # balances are then absent, the other chains' are served).
        "chains": {
            "type": "array",
            "items": closed_object(_CHAIN_LINE, ["chainId", "caip2", "name", "error"]),
        },
    },
    ["balances", "fiatAvailable", "fiatError", "chains"],
)


# --- inputs: what each tool takes (query of a GET, body of a POST) --------------------------

NO_INPUT_SCHEMA = closed_object({}, [])
TRANSACTIONS_INPUT_SCHEMA = closed_object(
    {
        "cursor": {
            "type": "string",
            "maxLength": 200,
            "description": "nextCursor of the previous page",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
    },
    [],
)
CARD_INPUT_SCHEMA = closed_object({"card_id": CARD_ID}, [])
# action_id is in the path: a malformed one answers "Action not found: …" (the seed's text).
ACTION_STATUS_INPUT_SCHEMA = closed_object({"action_id": {"type": "string"}}, ["action_id"])
TRANSFER_INPUT_SCHEMA = closed_object(
    {"asset_id": ASSET, "amount": AMOUNT, "to": RECIPIENT},
    ["asset_id", "amount", "to"],
)
SWAP_INPUT_SCHEMA = closed_object(
    {
        "from_asset_id": ASSET,
        "to_asset_id": ASSET,
        "amount": AMOUNT,
        "slippage": {"type": "number", "minimum": 0, "maximum": 50},
        "provider": {
            "type": "string",
            "minLength": 1,
            "maxLength": 64,
            "pattern": fullmatch_pattern(r"[A-Za-z0-9_.-]+"),
        },
    },
    ["from_asset_id", "to_asset_id", "amount"],
)
CARD_STATE_INPUT_SCHEMA = closed_object({"card_id": CARD_ID}, [])
CARD_LIMIT_INPUT_SCHEMA = closed_object(
    {"daily_limit": AMOUNT, "card_id": CARD_ID}, ["daily_limit"]
)

# --- spending permissions -------------------------------------------------------------------

SPEND_PERIODS = ["daily", "weekly", "monthly"]
REQUEST_SPEND_PERMISSION_INPUT_SCHEMA = closed_object(
    {
        "asset_id": ASSET,
        "amount": {**AMOUNT, "description": "the most that may be sent per period"},
        "period": {"type": "string", "enum": SPEND_PERIODS},
        "recipients": {
            "type": "array",
            "items": RECIPIENT,
            "maxItems": 20,
            "description": "who may be paid (0x addresses or ENS names); or any_recipient",
        },
        "any_recipient": {"type": "boolean", "default": False},
        "to_asset_id": {
            **ASSET,
            "description": "a pair to swap into, on the same chain (CAIP-19): `swap` of "
            "asset_id into it within the allowance needs no prompt; with no recipients the "
            "permission only swaps",
        },
        "starts_at": date_time("an RFC 3339 date-time with a time zone; default now"),
        "expires_at": date_time(
            "an RFC 3339 date-time with a time zone, like 2027-03-31T00:00:00Z: "
            "when the permission ends"
        ),
        "purpose": {"type": "string", "maxLength": 500, "description": "shown to the user"},
        "name": {"type": "string", "maxLength": 100, "description": "a short name for it"},
    },
    ["asset_id", "amount", "period", "expires_at"],
)
_SPEND = closed_object(
    {
        "action_id": {"type": "string"},
        "type": {"type": "string", "enum": ["transfer", "swap"]},
        "amount": {"type": "string"},
        "to": {"type": "string", "description": "the recipient, or a swap's output asset id"},
        "status": {"type": "string", "enum": ACTION_STATUSES},
        "created_at": DATE,
    },
    ["action_id", "type", "amount", "to", "status", "created_at"],
)
SPEND_PERMISSION_SCHEMA = closed_object(
    {
        "permission_id": {"type": "string"},
        "name": {"type": "string"},
        "purpose": {"type": "string"},
        "status": {
            "type": "string",
            "enum": [
                "requested",
                "granting",
                "active",
                "revoking",
                "revoked",
                "expired",
                "declined",
                "failed",
            ],
        },
        "chain_id": {"type": "integer"},
        "asset_id": {"type": "string"},
        "symbol": {"type": "string"},
        "allowance": DECIMAL,
        "period": {"type": "string", "enum": SPEND_PERIODS},
        "recipients": {
            "type": "array",
            "items": closed_object(
                {"address": {"type": "string"}, "name": NULL_STR}, ["address", "name"]
            ),
        },
        "any_recipient": {"type": "boolean"},
        "to_asset_id": NULL_STR,
        "to_symbol": NULL_STR,
        "starts_at": DATE,
        "expires_at": DATE,
        "remaining": {"anyOf": [DECIMAL, {"type": "null"}]},
        "period_ends_at": NULL_DATE,
        "remaining_error": NULL_STR,
        "spends": {"type": "array", "items": _SPEND},
    },
    [
        "permission_id",
        "name",
        "purpose",
        "status",
        "chain_id",
        "asset_id",
        "symbol",
        "allowance",
        "period",
        "recipients",
        "any_recipient",
        "to_asset_id",
        "to_symbol",
        "starts_at",
        "expires_at",
        "remaining",
        "period_ends_at",
        "remaining_error",
        "spends",
    ],
)
SPEND_PERMISSIONS_SCHEMA = closed_object(
    {"permissions": {"type": "array", "items": SPEND_PERMISSION_SCHEMA}}, ["permissions"]
)
