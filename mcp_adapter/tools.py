"""The MCP tool catalogue: each tool is one call to our DRF API, so permissions, scopes and
serialisation live in one place. Only the catalogue lives here (name, description, method and
path, scope, annotations, profiles); each tool's input and output schemas come from its app's
contract module, the same dicts the API validates against."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from actions.public import contract as actions
from messaging.public import contract as dm_contract
from operations.public import contract as operations


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str  # what clients show instead of the name (MCP 2025-11-25 Tool.title)
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
    # Its scope is asked for when a caller first uses it (403 insufficient_scope, the client's
    # step-up), not in the first authorization: every tool that proposes or sends something.
    step_up: bool = False


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
# A write that an idempotency key (or the state it reaches) makes safe to repeat.
REPEATABLE_WRITE = {**PROPOSES, "idempotentHint": True}
_ACTION_TOOL_SUFFIX = (
    " Returns sign_url (the user approves with their passkey) and resource_uri "
    "picnic://action/{action_id} to subscribe to; execution starts as soon as the user signs."
)


def _action_tool(name: str, title: str, description: str, input_schema: dict[str, Any]) -> ToolSpec:
    return ToolSpec(
        name=name,
        title=title,
        description=description + _ACTION_TOOL_SUFFIX,
        scope="write:actions",
        method="POST",
        path=f"/api/v1/actions/{name}",
        input_schema=input_schema,
        output_schema=actions.ACTION_CREATED_SCHEMA,
        annotations=PROPOSES,
        step_up=True,
    )


TOOLS: list[ToolSpec] = [
    ToolSpec(
        name="get_transactions",
        title="Transaction history",
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
        input_schema=actions.TRANSACTIONS_INPUT_SCHEMA,
        output_schema=actions.TRANSACTIONS_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_smart_accounts",
        title="Smart accounts",
        description=(
            "The smart accounts (picnic and gnosisPay) controlled by the user's passkey, with "
            "chain ID and account type."
        ),
        scope="read:accounts",
        method="GET",
        path="/api/v1/smart-accounts",
        input_schema=actions.NO_INPUT_SCHEMA,
        output_schema=actions.SMART_ACCOUNTS_SCHEMA,
        annotations=READ_ONLY,
    ),
    ToolSpec(
        name="get_balances",
        title="Balances",
        description=(
            "Token balances on the user's smart accounts, read from the chain: CAIP-19 assetId, "
            "contract address, symbol, exact decimal amount, and values in USD/EUR/BRL (null, "
            "with fiatError saying why, when the price source is unavailable)."
        ),
        scope="read:balances",
        method="GET",
        path="/api/v1/balances",
        input_schema=actions.NO_INPUT_SCHEMA,
        output_schema=actions.BALANCES_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_card",
        title="Card",
        description=(
            "The Picnic card: state (the last one confirmed with Gnosis Pay), balances of its "
            "account, the daily limit and what remains of it (Roles allowance on chain), the "
            "period and queued limit changes. A virtual card shows its physical sibling's."
        ),
        scope="read:card",
        method="GET",
        path="/api/v1/card",
        input_schema=actions.CARD_INPUT_SCHEMA,
        output_schema=actions.CARD_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_profile",
        title="Profile",
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
        input_schema=actions.NO_INPUT_SCHEMA,
        output_schema=actions.PROFILE_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    ToolSpec(
        name="get_action_status",
        title="Action status",
        description=(
            "Read the current state of a pending or past action by id (polling fallback for "
            "notifications/resources/updated of picnic://action/{action_id}). On a submitted or "
            "broadcast action it asks the bundler for the receipt and may advance the status "
            "first: best-effort, never fails for that, so not strictly read-only. "
            "signed_by_permission (and signed_by_permission_id) name the spending permission "
            "whose key signed it with no prompt; null when the user signed with the passkey."
        ),
        scope="read:actions",
        method="GET",
        path="/api/v1/actions/{action_id}",
        input_schema=actions.ACTION_STATUS_INPUT_SCHEMA,
        output_schema=actions.ACTION_STATUS_SCHEMA,
        annotations=REPEATABLE_WRITE,
        path_args=("action_id",),
    ),
    _action_tool(
        "transfer",
        "Send tokens",
        "Send a token from the user's smart account to a 0x address or an ENS name. Under an "
        "active spending permission of this agent that covers it (token, recipient, window, "
        "this period's remaining allowance on chain) it is signed at once with no prompt: "
        "sign_url is null and signed_by_permission names the permission. Otherwise the user "
        "signs, and permission_note says why the permission did not cover it.",
        actions.TRANSFER_INPUT_SCHEMA,
    ),
    _action_tool(
        "request_spend_permission",
        "Request a spending permission",
        "Ask the user, once, to let this agent send up to `amount` of a token per period "
        "(daily, weekly or monthly) to the listed recipients (0x addresses or ENS names, or "
        "any_recipient: true) from starts_at (default now) until expires_at, enforced by the "
        "user's account contract. With to_asset_id (a token on the same chain) it may also "
        "swap into that token, or only swap when no recipient is given. Once the user signs "
        "and it is on chain, `transfer` (and `swap` of the pair) calls within it need no "
        "prompt. The user can revoke it at any time.",
        actions.REQUEST_SPEND_PERMISSION_INPUT_SCHEMA,
    ),
    ToolSpec(
        name="get_spend_permissions",
        title="Spending permissions",
        description=(
            "This agent's spending permissions on the user's account (never another agent's): "
            "status, allowance per period, recipients, window, what remains of this period's "
            "allowance (read from the chain; null with remaining_error when it could not be "
            "read) and the spends made under each."
        ),
        scope="read:actions",
        method="GET",
        path="/api/v1/spend-permissions",
        input_schema=actions.NO_INPUT_SCHEMA,
        output_schema=actions.SPEND_PERMISSIONS_SCHEMA,
        annotations={**READ_ONLY, "openWorldHint": True},
    ),
    _action_tool(
        "swap",
        "Swap tokens",
        "Swap between two CAIP-19 assets (same chain or cross-chain); the signing page warns "
        "when slippage is 1% or more. Cross-chain, the action is `executed` when the source "
        "transaction is mined; the bridge's delivery on the other chain follows in "
        "get_action_status's status_history (details starting 'destination leg:'). A "
        "same-chain swap of a pair an active spending permission of this agent names, within "
        "its remaining allowance, is signed at once with no prompt (sign_url null, "
        "signed_by_permission); otherwise permission_note says why not.",
        actions.SWAP_INPUT_SCHEMA,
    ),
    _action_tool(
        "card_freeze",
        "Freeze the card",
        "Freeze the user's Picnic (Gnosis Pay) card; off-chain, signed as SIWE (EIP-1271).",
        actions.CARD_STATE_INPUT_SCHEMA,
    ),
    _action_tool(
        "card_unfreeze",
        "Unfreeze the card",
        "Unfreeze the user's Picnic (Gnosis Pay) card.",
        actions.CARD_STATE_INPUT_SCHEMA,
    ),
    _action_tool(
        "card_limit",
        "Change the card's daily limit",
        "Change the card's daily limit (delay module + scheduled transaction, not 4337; it "
        "takes effect after the cooldown). Daily only.",
        actions.CARD_LIMIT_INPUT_SCHEMA,
    ),
    ToolSpec(
        name="sosoapi_dm_actions_status",
        title="DM delivery status",
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
        title="Send a DM",
        description=(
            "Queue a DM through a workspace's social account. The same idempotency_key with "
            "the same payload returns the same action; with another payload it is refused."
        ),
        scope="agent:dm_write",
        method="POST",
        path="/private-messaging-api/actions/send",
        input_schema=dm_contract.SEND_INPUT_SCHEMA,
        output_schema=dm_contract.STATUS_OUTPUT_SCHEMA,
        annotations=REPEATABLE_WRITE,
        profiles=frozenset({"full"}),
        step_up=True,
    ),
    ToolSpec(
        name="tong_operation_status",
        title="Operation status",
        description=(
            "An accepted request is not a finished generation. Follow the work until the "
            "result is ready."
        ),
        scope="operations:read",
        method="GET",
        path="/api/v1/operations/{operation_id}",
        input_schema=operations.STATUS_INPUT_SCHEMA,
        output_schema=operations.OPERATION_STATUS_SCHEMA,
        annotations=READ_ONLY,
        profiles=frozenset({"full"}),
        path_args=("operation_id",),
    ),
    ToolSpec(
        name="tong_operation_quote",
        title="Quote an operation",
        description=(
            "Price a generation before anything is held: the breakdown in credits (six "
            "decimals, as the ledger) and the quote's expires_at. Nothing is charged; start "
            "the operation with tong_operation_start and the quote's id before it expires."
        ),
        scope="operations:write",
        method="POST",
        path="/api/v1/quotes",
        input_schema=operations.QUOTE_INPUT_SCHEMA,
        output_schema=operations.QUOTE_SCHEMA,
        annotations={**PROPOSES, "openWorldHint": False},
        profiles=frozenset({"full"}),
        step_up=True,
    ),
    ToolSpec(
        name="tong_operation_start",
        title="Start an operation",
        description=(
            "Start a generation at a quoted price: holds the quote's credits and queues the "
            "work (a policy may send it to a staff reviewer first). Refused, with nothing held, "
            "for an expired, used or unknown quote or a wallet that cannot cover the hold. The "
            "same idempotency_key returns the same operation. Accepted is not finished: follow "
            "it as a task, with tong_operation_status, or subscribe to tong://operation/{id}."
        ),
        scope="operations:write",
        method="POST",
        path="/api/v1/operations",
        input_schema=operations.START_INPUT_SCHEMA,
        output_schema=operations.OPERATION_STATUS_SCHEMA,
        annotations=REPEATABLE_WRITE,
        profiles=frozenset({"full"}),
        step_up=True,
    ),
    ToolSpec(
        name="tong_operation_cancel",
        title="Cancel an operation",
        description=(
            "Cancel an operation that is queued, waiting, paused or in review; its hold is "
            "released. A finished or generating operation is not cancelled (the error says "
            "its state)."
        ),
        scope="operations:write",
        method="POST",
        path="/api/v1/operations/{operation_id}/cancel",
        input_schema=operations.CANCEL_INPUT_SCHEMA,
        output_schema=operations.OPERATION_STATUS_SCHEMA,
        annotations={**REPEATABLE_WRITE, "destructiveHint": True},
        profiles=frozenset({"full"}),
        path_args=("operation_id",),
        step_up=True,
    ),
    ToolSpec(
        name="tong_operation_result",
        title="Operation result",
        description=(
            "The generated output of an operation (ready once it succeeded), kept until "
            "detail_expires_at; after that the answer says that it expired."
        ),
        scope="operations:read",
        method="GET",
        path="/api/v1/operations/{operation_id}/result",
        input_schema=operations.RESULT_INPUT_SCHEMA,
        output_schema=operations.RESULT_SCHEMA,
        annotations=READ_ONLY,
        profiles=frozenset({"full"}),
        path_args=("operation_id",),
    ),
]
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
PROFILES = ("core", "full")
# What reading picnic://action/{action_id} (and following it) needs: get_action_status's scope.
RESOURCE_SCOPE = TOOLS_BY_NAME["get_action_status"].scope
# The one resource template: an action, by id.
ACTION_URI = re.compile(r"^picnic://action/([0-9a-fA-F-]{36})$")
# An operation, by id (core.lifecycle: the operation lifecycle's resource_uri_template); read
# with tong_operation_status's scope.
OPERATION_URI = re.compile(r"^tong://operation/([0-9a-fA-F-]{36})$")
OPERATION_RESOURCE_SCOPE = TOOLS_BY_NAME["tong_operation_status"].scope


def resource_scope(uri: str) -> str | None:
    """The scope reading (or following) a resource URI needs, or None for no resource."""
    if ACTION_URI.match(uri):
        return RESOURCE_SCOPE
    if OPERATION_URI.match(uri):
        return OPERATION_RESOURCE_SCOPE
    return None


def resource_api_path(uri: str) -> str | None:
    """The API path whose GET reads the resource `uri` (with the caller's token), or None."""
    if match := ACTION_URI.match(uri):
        return f"/api/v1/actions/{match[1]}"
    if match := OPERATION_URI.match(uri):
        return f"/api/v1/operations/{match[1]}"
    return None
