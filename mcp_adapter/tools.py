"""The MCP tool catalogue: each tool is one call to our DRF API, so permissions, scopes and
serialisation live in one place. Schemas are written from the seeds (the DM tool's verbatim)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from messaging import contract as dm_contract
from operations.schema import OPERATION_STATUS_SCHEMA

NULL_STR = {"type": ["string", "null"]}
NULL_INT = {"type": ["integer", "null"]}
DATE = {"type": "string", "format": "date-time"}
NULL_DATE = {"type": ["string", "null"], "format": "date-time"}
ACTION_TYPES = ["transfer", "swap", "cardFreeze", "cardUnfreeze", "cardLimitSet"]
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


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


ACTION_STATUS_SCHEMA = _object(
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
            "items": _object(
                {
                    "status": {"type": "string", "enum": ACTION_STATUSES},
                    "timestamp": DATE,
                    "detail": NULL_STR,
                },
                ["status", "timestamp", "detail"],
            ),
        },
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
    ],
)

# What every action tool answers: where the user signs, and what to subscribe to.
ACTION_CREATED_SCHEMA = _object(
    {
        "action_id": {"type": "string"},
        "type": {"type": "string", "enum": ACTION_TYPES},
        "status": {"type": "string", "const": "proposed"},
        "summary": {"type": "string"},
        "sign_url": {"type": "string"},
        "resource_uri": {"type": "string", "pattern": "^picnic://action/"},
        "user_op_hash": NULL_STR,
        "expires_at": DATE,
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

CARD_ID = {"type": "string", "description": "Gnosis Pay card id; default: the physical card"}
DECIMAL = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}
ASSET = {"type": "string", "description": "CAIP-19 asset id, eip155:<chain>/erc20:<address>"}

SMART_ACCOUNT = {
    "type": "object",
    "properties": {
        "address": {"type": "string"},
        "chainId": {"type": "integer"},
        "accountType": {"type": "string", "enum": ["picnic", "gnosisPay"]},
        "entryPointVersion": {"type": "string"},
        "owner": {"type": "string"},
    },
    "required": ["address", "chainId", "accountType"],
    "additionalProperties": False,
}
SMART_ACCOUNTS_SCHEMA = _object(
    {"smartAccounts": {"type": "array", "items": SMART_ACCOUNT}}, ["smartAccounts"]
)
FIAT_VALUES = {
    "type": ["object", "null"],
    "properties": {c: DECIMAL for c in ("USD", "EUR", "BRL")},
    "required": ["USD", "EUR", "BRL"],
    "additionalProperties": False,
}
_CARD_BALANCE = _object(
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
_RAMP = _object(
    {
        "provider": {"type": "string", "enum": ["avenia", "monerium"]},
        "providerName": {"type": "string"},
        "accountId": NULL_STR,
        "kyc": _object(
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
PROFILE_SCHEMA = _object(
    {
        "userId": {"type": "string"},
        "email": NULL_STR,
        "ramps": _object({"BRL": _RAMP, "EUR": _RAMP}, ["BRL", "EUR"]),
        "cards": {"type": "array", "items": _object(CARD_SUMMARY, list(CARD_SUMMARY))},
    },
    ["userId", "email", "ramps", "cards"],
)
_FLOW = _object(
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
_CURRENCY = _object(
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
            "items": _object(
                {"chainId": {"type": "integer"}, "txHash": {"type": "string"}},
                ["chainId", "txHash"],
            ),
        },
        "swap": _object(
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
        "ramp": _object(
            {
                "provider": {"type": "string"},
                "direction": {"type": "string", "enum": ["onramp", "offramp"]},
                "fiatCurrency": NULL_STR,
                "amount": DECIMAL,
                "assetId": {"type": "string"},
            },
            ["provider", "direction", "fiatCurrency", "amount", "assetId"],
        ),
        "investment": _object(
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
        "cardPurchase": _object(
            {
                "cardId": {"type": "string"},
                "last4": {"type": "string"},
                "kind": {"type": "string"},
                "status": {"type": "string"},
                "isPending": {"type": "boolean"},
                "clearedAt": NULL_DATE,
                "merchant": _object(
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
TRANSACTIONS_SCHEMA = _object(
    {
        "transactions": {"type": "array", "items": _TRANSACTION},
        "nextCursor": NULL_STR,
        "sync": {
            "type": ["object", "null"],
            "properties": {
                "chain": _object(
                    {"chainId": {"type": "integer"}, "syncedToBlock": NULL_INT, **_SOURCE_ERROR},
                    ["chainId", "syncedToBlock", "error"],
                ),
                "gnosisPay": _object(
                    {"syncedAt": NULL_DATE, **_SOURCE_ERROR}, ["syncedAt", "error"]
                ),
            },
            "required": ["chain", "gnosisPay"],
            "additionalProperties": False,
        },
    },
    ["transactions", "nextCursor", "sync"],
)
CARD_SCHEMA = _object(
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
                "period": _object(
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
BALANCES_SCHEMA = _object(
    {
        "balances": {
            "type": "array",
            "items": _object(
                {
                    "account": {"type": "string"},
                    "accountType": {"type": "string", "enum": ["picnic", "gnosisPay"]},
                    "chainId": {"type": "integer"},
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
    },
    ["balances", "fiatAvailable", "fiatError"],
)


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    scope: str
    method: str
    path: str  # may name arguments: {action_id}
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, bool]
    profiles: frozenset[str] = field(default_factory=lambda: frozenset({"core", "full"}))
    # Arguments that go into the path, not the body.
    path_args: tuple[str, ...] = ()


READ_ONLY = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}
# An action tool only proposes: nothing moves until the user signs on the page.
PROPOSES = {
    "readOnlyHint": False,
    "destructiveHint": False,
    "idempotentHint": False,
    "openWorldHint": True,
}
_ACTION_TOOL_SUFFIX = (
    " Returns sign_url (the user approves with their passkey) and resource_uri "
    "picnic://action/{action_id} to subscribe to; execution starts as soon as the user signs."
)


def _action_tool(name: str, description: str, properties: dict, required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description + _ACTION_TOOL_SUFFIX,
        scope="write:actions",
        method="POST",
        path=f"/api/v1/actions/{name}",
        input_schema=_object(properties, required),
        output_schema=ACTION_CREATED_SCHEMA,
        annotations=PROPOSES,
    )


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="get_transactions",
        description=(
            "The user's history, newest first: transfers, swaps, ramps, investments, card "
            "purchases (merchant, MCC, billing amount) and card actions, each with assetId + "
            "formattedAmount per flow and receipts [{chainId, txHash}]. Pass nextCursor back as "
            "cursor for the next page; pages stay stable while new transactions arrive. `sync` "
            "(first page only) says how fresh each source is and why one could not be read."
        ),
        scope="read:transactions",
        method="GET",
        path="/api/v1/transactions",
        input_schema=_object(
            {
                "cursor": {"type": "string", "description": "nextCursor of the previous page"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            },
            [],
        ),
        output_schema=TRANSACTIONS_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_smart_accounts",
        description=(
            "The smart accounts (picnic and gnosisPay) controlled by the user's passkey, with "
            "chain ID and account type."
        ),
        scope="read:accounts",
        method="GET",
        path="/api/v1/smart-accounts",
        input_schema=_object({}, []),
        output_schema=SMART_ACCOUNTS_SCHEMA,
        annotations=READ_ONLY,
    ),
    ToolSpec(
        name="get_balances",
        description=(
            "Token balances on the user's smart accounts, read from the chain: CAIP-19 assetId, "
            "contract address, symbol, exact decimal amount, and values in USD/EUR/BRL (null, "
            "with fiatError saying why, when the price source is unavailable)."
        ),
        scope="read:balances",
        method="GET",
        path="/api/v1/balances",
        input_schema=_object({}, []),
        output_schema=BALANCES_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_card",
        description=(
            "The Picnic card: state (the last one confirmed with Gnosis Pay), balances of its "
            "account, the daily limit and what remains of it (Roles allowance on chain), the "
            "period and queued limit changes. A virtual card shows its physical sibling's."
        ),
        scope="read:card",
        method="GET",
        path="/api/v1/card",
        input_schema=_object({"card_id": CARD_ID}, []),
        output_schema=CARD_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_profile",
        description=(
            "The user's profile: userId, email, fiat ramps keyed by currency (BRL at "
            "BRLA/Avenia, EUR at Monerium) with KYC status normalised to "
            "none|pending|approved|rejected (the provider's own word beside it; error set, and "
            "the last known status kept, when the provider could not be asked), and the "
            "Gnosis Pay cards."
        ),
        scope="read:profile",
        method="GET",
        path="/api/v1/profile",
        input_schema=_object({}, []),
        output_schema=PROFILE_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_action_status",
        description=(
            "Read the current state of a pending or past action by id (polling fallback for "
            "notifications/resources/updated of picnic://action/{action_id}). On a submitted or "
            "broadcast action it asks the bundler for the receipt and may advance the status "
            "first: best-effort, never fails for that, so not strictly read-only."
        ),
        scope="read:actions",
        method="GET",
        path="/api/v1/actions/{action_id}",
        input_schema=_object({"action_id": {"type": "string"}}, ["action_id"]),
        output_schema=ACTION_STATUS_SCHEMA,
        annotations={
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": True,
        },
        path_args=("action_id",),
    ),
    _action_tool(
        "transfer",
        "Send a token from the user's smart account to a 0x address or an ENS name.",
        {"asset_id": ASSET, "amount": DECIMAL, "to": {"type": "string"}},
        ["asset_id", "amount", "to"],
    ),
    _action_tool(
        "swap",
        "Swap between two CAIP-19 assets (same chain or cross-chain); the signing page warns "
        "when slippage is 1% or more.",
        {
            "from_asset_id": ASSET,
            "to_asset_id": ASSET,
            "amount": DECIMAL,
            "slippage": {"type": "number", "minimum": 0, "maximum": 50},
            "provider": {"type": "string"},
        },
        ["from_asset_id", "to_asset_id", "amount"],
    ),
    _action_tool(
        "card_freeze",
        "Freeze the user's Picnic (Gnosis Pay) card; off-chain, signed as SIWE (EIP-1271).",
        {"card_id": CARD_ID},
        [],
    ),
    _action_tool(
        "card_unfreeze", "Unfreeze the user's Picnic (Gnosis Pay) card.", {"card_id": CARD_ID}, []
    ),
    _action_tool(
        "card_limit",
        "Change the card's daily limit (delay module + scheduled transaction, not 4337; it "
        "takes effect after the cooldown). Daily only.",
        {"daily_limit": DECIMAL, "card_id": CARD_ID},
        ["daily_limit"],
    ),
    ToolSpec(
        name="sosoapi_dm_actions_status",
        description=(
            "After losing a response, look up delivery facts by action_id or the original "
            "idempotency_key. An unknown delivery is not a failure and must not be re-sent."
        ),
        scope="agent:dm_read",
        method="POST",
        path="/private-messaging-api/actions/status",
        input_schema=dm_contract.STATUS_INPUT_SCHEMA,
        output_schema=dm_contract.STATUS_OUTPUT_SCHEMA,
        annotations=dm_contract.ANNOTATIONS,
        profiles=frozenset({"full"}),
    ),
    ToolSpec(
        name="sosoapi_dm_actions_send",
        description=(
            "Queue a DM through a workspace's social account. The same idempotency_key with "
            "the same payload returns the same action; with another payload it is refused."
        ),
        scope="agent:dm_write",
        method="POST",
        path="/private-messaging-api/actions/send",
        input_schema=dm_contract.SEND_INPUT_SCHEMA,
        output_schema=dm_contract.STATUS_OUTPUT_SCHEMA,
        annotations={
            "readOnlyHint": False,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": True,
        },
        profiles=frozenset({"full"}),
    ),
    ToolSpec(
        name="tong_operation_status",
        description=(
            "An accepted request is not a finished generation. Follow the work until the "
            "result is ready."
        ),
        scope="operations:read",
        method="GET",
        path="/api/v1/operations/{operation_id}",
        input_schema=_object(
            {"operation_id": {"type": "string", "format": "uuid"}}, ["operation_id"]
        ),
        output_schema=OPERATION_STATUS_SCHEMA,
        annotations=READ_ONLY,
        profiles=frozenset({"full"}),
        path_args=("operation_id",),
    ),
]
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
PROFILES = ("core", "full")
