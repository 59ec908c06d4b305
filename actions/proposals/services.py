"""Proposals, the first step of an action's lifecycle: one entry per action tool. A transfer or
a swap goes under the agent's spending permission when one covers it (signed by its session
key, permissions/spending.py), else it is proposed for the passkey; the card tools always are.
The request itself is checked and built in tool_requests/checks.py."""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from web3 import Web3

from actions.bridges.public import bridge_leg_open
from actions.card.models import Card
from actions.evm_clients import on_chain, tool_web3
from actions.execution.models import Action, ActionType
from actions.execution.public import action_create
from actions.permissions.public import (
    NotCovered,
    Reason,
    note_text,
    permission_for_swap,
    permission_for_transfer,
    stored,
    swap_under_permission,
    transfer_under_permission,
)
from actions.providers.gnosis_pay import (
    GnosisPayClient,
    GnosisPayError,
    Unavailable,
    siwe_message,
)
from actions.tool_requests.public import (
    SwapRequest,
    ToolError,
    TransferRequest,
    chain_of,
    op_with_gas,
    passkey_client,
    picnic_account,
    swap_params,
    swap_quote,
    swap_request,
    transfer_request,
    units_of,
)
from evm import zodiac
from evm.safe import eip191_hash, safe_message_hash

_ERC20_ABI = [
    {
        "type": "function",
        "name": "transfer",
        "stateMutability": "nonpayable",
        "inputs": [{"name": "to", "type": "address"}, {"name": "amount", "type": "uint256"}],
        "outputs": [{"name": "", "type": "bool"}],
    },
    {
        "type": "function",
        "name": "approve",
        "stateMutability": "nonpayable",
        "inputs": [{"name": "spender", "type": "address"}, {"name": "amount", "type": "uint256"}],
        "outputs": [{"name": "", "type": "bool"}],
    },
    {
        "type": "function",
        "name": "balanceOf",
        "stateMutability": "view",
        "inputs": [{"name": "owner", "type": "address"}],
        "outputs": [{"name": "", "type": "uint256"}],
    },
]


def transfer_propose(*, user, application, asset_id: str, amount: str, to: str) -> Action:
    """transfer: under the agent's active spending permission that covers it, signed by its
    session key with no prompt; otherwise proposed for the passkey, saying why not."""
    request = transfer_request(asset_id=asset_id, amount=amount, to=to)
    permission, reasons = permission_for_transfer(
        user=user,
        application=application,
        token=request.token,
        recipient=request.recipient,
        recipient_shown=request.name or request.recipient,
        units=request.units,
    )
    if permission is not None:
        try:
            return transfer_under_permission(
                permission=permission, user=user, application=application, request=request
            )
        except NotCovered as exc:
            reasons = [exc.reason]
    return transfer_propose_to_user(
        user=user, application=application, request=request, permission_reasons=reasons
    )


def swap_propose(
    *,
    user,
    application,
    from_asset_id: str,
    to_asset_id: str,
    amount: str,
    slippage=None,
    provider: str | None = None,
) -> Action:
    """swap: under the agent's active permission that names this pair (same chain, within
    the remaining allowance), signed by its session key with no prompt; otherwise proposed for
    the passkey, saying why not. One quote serves either way."""
    request = swap_request(
        user=user,
        from_asset_id=from_asset_id,
        to_asset_id=to_asset_id,
        amount=amount,
        slippage=slippage,
        provider=provider,
    )
    permission, reasons = permission_for_swap(user=user, application=application, request=request)
    quote = None
    if permission is not None:
        with on_chain(request.chain):
            quote = swap_quote(request, from_address=request.account.address)
        try:
            return swap_under_permission(
                permission=permission,
                user=user,
                application=application,
                request=request,
                quote=quote,
            )
        except NotCovered as exc:
            reasons = [exc.reason]
    return swap_propose_to_user(
        user=user,
        application=application,
        request=request,
        quote=quote,
        permission_reasons=reasons,
    )


def swap_propose_to_user(
    *,
    user,
    application,
    request: SwapRequest,
    quote=None,
    permission_reasons: Sequence[Reason] = (),
) -> Action:
    """The swap for the passkey: approve (when the route needs it) and the provider's call, in
    one batch. `quote`: one already fetched for this request; `permission_reasons`: why a
    spending permission of the agent did not cover it (told to the agent, and on the signing
    page in the user's language)."""
    permission_note = note_text(permission_reasons)
    chain, token, account = request.chain, request.token, request.account
    with on_chain(chain):
        w3 = tool_web3(chain.id)
        client = passkey_client(w3, account)
        if quote is None:
            quote = swap_quote(request, from_address=client.address)
        calls = []
        # A route that moves the tokens in its own transaction (a bridge deposit) needs no
        # allowance: LI.FI then names the zero address as the approval address.
        if int(quote.approval_address, 16) != 0:
            erc20 = w3.eth.contract(address=Web3.to_checksum_address(token.address), abi=_ERC20_ABI)
            approve = erc20.encode_abi(
                "approve", [Web3.to_checksum_address(quote.approval_address), request.units]
            )
            calls.append((token.address, 0, Web3.to_bytes(hexstr=approve)))
        calls.append((quote.tx_to, quote.tx_value, Web3.to_bytes(hexstr=quote.tx_data)))
        call = client.execute_batch(calls)
        params, summary, quote_ttl = swap_params(request, quote)
        params.update(_permission_params(permission_reasons))
        op = op_with_gas(client, call, params, chain=chain)
    with transaction.atomic():
        action = action_create(
            user=user,
            application=application,
            type=ActionType.SWAP,
            summary=summary,
            detail=_permission_detail(permission_note),
            chain_id=chain.id,
            smart_account=account.address,
            params=params,
            user_op=op,
            entry_point_version=account.entry_point_version,
            ttl_seconds=quote_ttl,
        )
        if request.cross_chain:
            bridge_leg_open(action=action, quote=quote, to_asset_id=request.to_asset_id)
    return action


def _card(user, card_id: str | None) -> Card:
    """The user's card by id, or their physical card (a virtual one shares its account)."""
    cards = Card.objects.select_related("token").filter(user=user)
    card = (
        cards.filter(card_id=card_id).first() if card_id else cards.filter(is_virtual=False).first()
    )
    if card is None:
        raise ToolError("No Picnic card for this user" + (f" with id {card_id}" if card_id else ""))
    return card


def card_limit_propose(
    *, user, application, daily_limit: str, card_id: str | None = None
) -> Action:
    """card_limit: the daily limit is the Roles allowance of the card's Safe (refilled every
    day); the change is enqueued in the Safe's Delay modifier by the passkey account (a signed
    Zodiac module transaction, relayed, not 4337) and runs after the cooldown."""

    card = _card(user, card_id)
    if not (card.delay_address and card.roles_address and card.token):
        raise ToolError(
            f"Card •••• {card.last4} has no delay module or spending token: its account is not set up"
        )
    value, units = units_of(daily_limit, card.token.decimals)
    if units > zodiac.UINT128_MAX:
        raise ToolError("daily_limit is too large")
    account = picnic_account(user, chain_of(card.chain_id))
    inner = zodiac.set_daily_allowance_call(units)
    module_data = zodiac.exec_from_module_call(card.roles_address, 0, inner)
    salt = secrets.token_bytes(32)
    challenge = zodiac.module_tx_hash(
        chain_id=card.chain_id, modifier=card.delay_address, data=module_data, salt=salt
    )
    cooldown = settings.CARD_DELAY_COOLDOWN_SECONDS
    return action_create(
        user=user,
        application=application,
        type=ActionType.CARD_LIMIT_SET,
        summary=(
            f"Set the daily limit of your Picnic card •••• {card.last4} to {value} "
            f"{card.token.symbol} (takes effect about {cooldown} s after you sign: the card "
            "account's delay module holds the change for its cooldown)"
        ),
        chain_id=card.chain_id,
        smart_account=card.safe_address,
        params={
            "card_id": card.card_id,
            "last4": card.last4,
            "daily_limit": str(value),
            "units": str(units),
            "symbol": card.token.symbol,
            "asset_id": card.token.asset_id,
            "delay": card.delay_address,
            "roles": card.roles_address,
            "inner_data": "0x" + inner.hex(),
            "module_data": "0x" + module_data.hex(),
            "salt": "0x" + salt.hex(),
            "challenge": "0x" + challenge.hex(),
            "owner": account.address,
        },
    )


def card_state_propose(*, user, application, frozen: bool, card_id: str | None = None) -> Action:
    """card_freeze / card_unfreeze: off-chain; the passkey signs a SIWE message for the card's
    Safe (EIP-1271), which Gnosis Pay exchanges for the token that freezes or unfreezes."""

    card = _card(user, card_id)
    chain = chain_of(card.chain_id)
    account = picnic_account(user, chain)
    client = GnosisPayClient(settings.GNOSIS_PAY_URL, timeout=settings.GNOSIS_PAY_TIMEOUT_SECONDS)
    try:
        nonce = client.nonce()
    except Unavailable:
        raise  # not the input's fault: the view answers 503
    except GnosisPayError as exc:
        raise ToolError(f"Gnosis Pay could not start the sign-in: {exc}") from None
    verb = "Freeze" if frozen else "Unfreeze"
    message = siwe_message(
        domain=client.domain,
        address=card.safe_address,
        uri=settings.GNOSIS_PAY_URL,
        chain_id=card.chain_id,
        nonce=nonce,
        issued_at=timezone.now(),
        statement=f"{verb} Picnic card ending in {card.last4}.",
    )
    with on_chain(chain):
        challenge = safe_message_hash(tool_web3(chain.id), card.safe_address, eip191_hash(message))
    return action_create(
        user=user,
        application=application,
        type=ActionType.CARD_FREEZE if frozen else ActionType.CARD_UNFREEZE,
        summary=f"{verb} your Picnic card •••• {card.last4}",
        chain_id=card.chain_id,
        smart_account=card.safe_address,
        params={
            "card_id": card.card_id,
            "last4": card.last4,
            "siwe_message": message,
            "challenge": "0x" + challenge.hex(),
            "owner": account.address,
            "frozen": frozen,
        },
    )


def _permission_params(reasons: Sequence[Reason]) -> dict:
    """The reasons a permission did not cover it: the agent's English note, and the codes the
    signing page translates (nothing when no permission was involved)."""
    if not reasons:
        return {}
    return {"permission_note": note_text(reasons), "permission_reasons": stored(reasons)}


def _permission_detail(permission_note: str) -> str | None:
    """The history's first line when a permission was asked and did not cover it."""
    if not permission_note:
        return None
    return f"proposed by the action tool; not under a spending permission: {permission_note}"


def transfer_propose_to_user(
    *,
    user,
    application,
    asset_id: str = "",
    amount: str = "",
    to: str = "",
    request: TransferRequest | None = None,
    permission_reasons: Sequence[Reason] = (),
) -> Action:
    """transfer, signed with the passkey. `permission_reasons`: why a spending permission of the
    agent did not cover it (in the tool's answer, the action's history and, in the user's
    language, on the signing page)."""
    permission_note = note_text(permission_reasons)
    request = request or transfer_request(asset_id=asset_id, amount=amount, to=to)
    token, units, chain, recipient = request.token, request.units, request.chain, request.recipient
    with on_chain(chain):
        w3 = tool_web3(chain.id)
        account = picnic_account(user, chain)
        client = passkey_client(w3, account)
        erc20 = w3.eth.contract(address=Web3.to_checksum_address(token.address), abi=_ERC20_ABI)
        call = client.execute(
            erc20.address,
            0,
            Web3.to_bytes(hexstr=erc20.encode_abi("transfer", [recipient, units])),
        )
        params = request.params()
        params.update(_permission_params(permission_reasons))
        op = op_with_gas(client, call, params, chain=chain)
    return action_create(
        user=user,
        application=application,
        type=ActionType.TRANSFER,
        summary=request.summary,
        detail=_permission_detail(permission_note),
        chain_id=token.chain_id,
        smart_account=account.address,
        params=params,
        user_op=op,
        entry_point_version=account.entry_point_version,
    )
