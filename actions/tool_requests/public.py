"""The tool requests room's face: a tool's request checked and built (asset, amount, recipient,
account, swap quote, the user operation with gas) and `ToolError`, for the proposals and the
spending permissions.
"""

from __future__ import annotations

from actions.tool_requests.checks import (
    SwapRequest,
    ToolError,
    TransferRequest,
    chain_of,
    op_with_gas,
    passkey_client,
    picnic_account,
    recipient_of,
    swap_params,
    swap_quote,
    swap_request,
    token_of,
    transfer_request,
    units_of,
)

__all__ = [
    "SwapRequest",
    "ToolError",
    "TransferRequest",
    "chain_of",
    "op_with_gas",
    "passkey_client",
    "picnic_account",
    "recipient_of",
    "swap_params",
    "swap_quote",
    "swap_request",
    "token_of",
    "transfer_request",
    "units_of",
]
