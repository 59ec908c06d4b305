"""Proposals, the first step of an action's lifecycle: the action tools (transfer, swap,
card_freeze/card_unfreeze, card_limit) check the request, build what the passkey will sign
(a user operation, a SIWE message, a Zodiac module transaction) and create a `proposed` action.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from web3 import Web3

from actions.chain_reads import CHAIN_RPC_ERRORS
from actions.evm_clients import bundler_client, on_chain
from actions.models import Action, ActionType, Card, SmartAccount, SmartAccountKind, Token
from actions.providers.gnosis_pay import (
    GnosisPayClient,
    GnosisPayError,
    Unavailable,
    siwe_message,
)
from actions.providers.lifi import LifiClient, ProviderUnavailable, QuoteError
from actions.services.bridges import bridge_leg_open
from actions.services.lifecycle import action_create
from actions.services.passkeys import smart_accounts_cover_chains
from actions.services.permission_reasons import Reason, note_text, stored
from core.api import failure_reason
from core.chains import Chain, UnknownChain, chain_name, get_chain
from core.errors import DomainError, redact
from core.formats import rfc3339
from core.metrics import instrument_web3
from evm import ens, zodiac
from evm.bundler import BundlerError
from evm.passkey_account import PasskeyAccountClient
from evm.rpc import http_web3
from evm.safe import eip191_hash, safe_message_hash

# Matched whole (fullmatch): `$` would let a trailing newline through, `\d` Unicode digits.
ASSET_ID = re.compile(r"eip155:([1-9][0-9]{0,19})/erc20:(0x[0-9a-fA-F]{40})")
AMOUNT = re.compile(r"[0-9]+(\.[0-9]+)?")  # no sign, "_", spaces, exponent or non-ASCII digit
UINT256_MAX = 2**256 - 1
ZERO_ADDRESS = "0x" + "00" * 20
# The call's gas budget when the bundler's simulation says it reverts (see _build).
FALLBACK_CALL_GAS = 300_000

logger = logging.getLogger(__name__)


class ToolError(DomainError):
    """Bad input for a tool (400); the message says what to fix, `code` is the API error code.
    What the client reads is the message without internal addresses (a provider's text)."""

    def __init__(
        self, message: str, *, code: str = "invalid", errors: dict[str, list[str]] | None = None
    ) -> None:
        super().__init__(message, code=code, errors=errors)
        self.message = redact(message)


def _token(asset_id: str) -> Token:
    match = ASSET_ID.fullmatch(asset_id or "")
    if not match:
        raise ToolError(
            f"asset_id must be a CAIP-19 ERC-20 id (eip155:<chain>/erc20:<address>), got {asset_id!r}"
        )
    token = Token.objects.filter(chain_id=int(match[1]), address__iexact=match[2]).first()
    if token is None:
        raise ToolError(f"Unknown token: {asset_id}")
    _chain(token.chain_id)  # a token row of a chain no longer served is refused here
    return token


def _chain(chain_id: int) -> Chain:
    try:
        return get_chain(chain_id)
    except UnknownChain:
        raise ToolError(f"chain {chain_id} is not served here") from None


def _units(amount: str, decimals: int) -> tuple[Decimal, int]:
    # Decimal() alone takes "1_000", " 7 ", "+1", "1e3" and "١٠": only ASCII digits here.
    if not isinstance(amount, str) or len(amount) > 157 or not AMOUNT.fullmatch(amount):
        raise ToolError(f"amount must be a decimal string of digits like 12.5, got {amount!r}")
    try:
        value = Decimal(amount)
    except (InvalidOperation, ValueError):
        raise ToolError(f"amount must be a decimal string, got {amount!r}") from None
    if not value.is_finite() or value <= 0:
        raise ToolError("amount must be greater than zero")
    if -value.as_tuple().exponent > decimals:
        raise ToolError(f"amount has more than {decimals} decimals, the token's precision")
    units = int(value.scaleb(decimals))
    if units > UINT256_MAX:  # would not encode as a uint256
        raise ToolError("amount is too large for the token (more than 2**256 - 1 units)")
    return value, units


def _recipient(to: str, chain: Chain) -> tuple[str, str]:
    """The checksummed address to pay and the ENS name shown beside it ("" for none).

    A name is ENSIP-15 normalised and resolved now, on the asset's chain: the address goes into
    the user operation, so what is signed cannot change with the name's records later. A 0x
    address gets its verified primary name (reverse record, then forward check) when the chain
    has one; that lookup is best-effort and never refuses the transfer."""
    to = (to or "").strip()
    if re.fullmatch(r"0x[0-9a-fA-F]{40}", to):
        body = to[2:]
        # All-lowercase or all-uppercase carries no checksum; mixed case must be valid EIP-55.
        if body not in (body.lower(), body.upper()) and not Web3.is_checksum_address(to):
            raise ToolError(f"{to} has an invalid EIP-55 checksum")
        if to.lower() == ZERO_ADDRESS:
            raise ToolError("to must not be the zero address: tokens sent there are lost")
        address = Web3.to_checksum_address(to)
        return address, _primary_name(address, chain)
    try:
        name = ens.normalize(to)
    except ens.EnsNameInvalid as exc:
        raise ToolError(
            f"{to[:80]!r}{'…' if len(to) > 80 else ''} is not a valid ENS name: {exc}",
            code=exc.code,
            errors={"to": [str(exc)]},
        ) from None
    if not chain.ens_registry:
        raise ToolError(
            f"{chain.name} has no ENS registry: send to a 0x address there",
            code="ens_not_supported",
        )
    try:
        address = ens.EnsReader(_chain_web3(chain), chain.ens_registry).resolve(name)
    except ens.EnsNameNotFound:
        raise ToolError(
            f"The ENS name {name} was not found on {chain.name}, or points at no address",
            code="ens_name_not_found",
        ) from None
    except (ens.EnsUnavailable, *CHAIN_RPC_ERRORS) as exc:
        logger.warning("ENS on chain %s not readable: %r", chain.id, exc)
        raise ens.EnsUnavailable(
            f"ENS could not be read on {chain.name}: {failure_reason(exc)}"
        ) from exc
    return address, name


def _primary_name(address: str, chain: Chain) -> str:
    if not chain.ens_registry:
        return ""
    try:
        return ens.EnsReader(_chain_web3(chain), chain.ens_registry).reverse_name(address) or ""
    except (ens.EnsError, *CHAIN_RPC_ERRORS) as exc:  # a name is a nicety: the 0x stays
        logger.info("no primary name for %s on chain %s: %r", address, chain.id, exc)
        return ""


def _chain_web3(chain: Chain) -> Web3:
    timeout = settings.CHAIN_READ_TIMEOUT_SECONDS
    return instrument_web3(http_web3(chain.rpc_url, timeout=timeout), provider="chain_rpc")


def _account(user, chain: Chain) -> SmartAccount:
    """The user's passkey account on this chain (registered on every chain of the table)."""
    account = (
        SmartAccount.objects.select_related("passkey")
        .filter(
            user=user,
            kind=SmartAccountKind.PICNIC,
            passkey__isnull=False,
            chain_id=chain.id,
        )
        .first()
    )
    if account is None and smart_accounts_cover_chains(user=user):
        return _account(user, chain)  # a chain added to the table since they registered
    if account is None:
        raise ToolError(
            f"No Picnic smart account on {chain.name}: the user must register a passkey first"
        )
    return account


def web3(chain_id: int) -> Web3:
    """web3 on the chain of the thing in hand (the asset, the card), each call bounded as a
    read tool's are: an agent waits for the proposal."""
    timeout = settings.CHAIN_READ_TIMEOUT_SECONDS
    w3 = http_web3(get_chain(chain_id).rpc_url, timeout=timeout, retries=True)
    return instrument_web3(w3, provider="chain_rpc")


def passkey_client(w3: Web3, account: SmartAccount):
    """The chain client of a passkey-owned Picnic account."""
    return PasskeyAccountClient(
        w3,
        bytes.fromhex(account.passkey.public_key_x[2:]),
        bytes.fromhex(account.passkey.public_key_y[2:]),
        version=account.entry_point_version,
        salt=account.salt,
        origin=settings.WEBAUTHN_ORIGIN,
    )


def _build(client, call: str, params: dict, *, chain: Chain) -> dict:
    """The user operation with gas from the bundler.

    When the bundler's simulation says the call reverts, the verification gas still comes
    from the bundler (estimated on a no-op call from the same account, deployment included)
    and the call gets a fixed budget: the op can go out if the user signs, and ends `failed`
    with the on-chain reason; the signing page warns first."""
    bundler = bundler_client(chain.id, timeout=max(settings.BUNDLER_TIMEOUT_SECONDS, 10))
    try:
        return client.build(call, bundler)
    except BundlerError as exc:
        params["simulation_error"] = str(exc)
    probe = client.build(client.execute(client.address, 0, b""), bundler)
    gas = {
        "verificationGasLimit": probe["verificationGasLimit"],
        "preVerificationGas": probe["preVerificationGas"] * 2,  # the real callData is longer
        "callGasLimit": FALLBACK_CALL_GAS,
    }
    return client.build(call, bundler, gas=gas)


def _slippage(value) -> Decimal:
    if value is None:
        return Decimal("0.5")
    try:
        slippage = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise ToolError(f"slippage must be a percentage like 0.5, got {value!r}") from None
    if not slippage.is_finite() or slippage < 0 or slippage > 50:
        raise ToolError("slippage must be between 0 and 50 (percent)")
    return slippage


@dataclass(frozen=True)
class SwapRequest:
    """A swap as asked, checked (tokens, chains, amount, slippage), before any quote."""

    token: Token
    chain: Chain
    destination: Chain
    account: SmartAccount
    to_asset_id: str
    to_address: str
    value: Decimal
    units: int
    slippage_pct: Decimal
    provider: str | None

    @property
    def cross_chain(self) -> bool:
        return self.destination.id != self.chain.id


def swap_request(
    *,
    user,
    from_asset_id: str,
    to_asset_id: str,
    amount: str,
    slippage=None,
    provider: str | None = None,
) -> SwapRequest:
    token = _token(from_asset_id)
    to_match = ASSET_ID.fullmatch(to_asset_id or "")
    if not to_match:
        raise ToolError(f"to_asset_id must be a CAIP-19 ERC-20 id, got {to_asset_id!r}")
    if to_asset_id.lower() == token.asset_id.lower():
        raise ToolError("from_asset_id and to_asset_id are the same token")
    destination = _chain(int(to_match[1]))
    value, units = _units(amount, token.decimals)
    slippage_pct = _slippage(slippage)
    chain = _chain(token.chain_id)
    return SwapRequest(
        token=token,
        chain=chain,
        destination=destination,
        account=_account(user, chain),
        to_asset_id=to_asset_id,
        to_address=to_match[2],
        value=value,
        units=units,
        slippage_pct=slippage_pct,
        provider=provider,
    )


def swap_quote(request: SwapRequest, *, from_address: str):
    """The provider's quote for exactly this request (amount and chains checked). A LI.FI
    outage is not the input's fault: ProviderUnavailable goes up to the view (503)."""
    chain, destination = request.chain, request.destination
    try:
        quote = LifiClient(
            settings.SWAP_QUOTE_URL, timeout=settings.SWAP_QUOTE_TIMEOUT_SECONDS
        ).quote(
            from_chain=chain.id,
            to_chain=destination.id,
            from_token=request.token.address,
            to_token=request.to_address,
            from_amount=request.units,
            from_address=from_address,
            slippage_percent=request.slippage_pct,
            provider=request.provider,
        )
    except ProviderUnavailable:
        raise  # an outage, not the input's fault: the view answers 503
    except QuoteError as exc:
        raise ToolError(str(exc)) from None
    # Sign only what was asked: the quote must spend exactly this amount on this chain, and
    # deliver on the chain asked for.
    if (
        quote.from_amount != request.units
        or quote.from_chain_id != chain.id
        or quote.tx_chain_id != chain.id
        or quote.to_chain_id != destination.id
    ):
        raise ToolError(
            "the swap quote does not match the request (amount or chain); nothing was proposed"
        )
    return quote


def swap_params(request: SwapRequest, quote) -> tuple[dict, str, int]:
    """The action's params, its summary and its time to live (the quote's)."""
    token, chain, destination, value = (
        request.token,
        request.chain,
        request.destination,
        (request.value),
    )
    to_symbol = quote.to_token.get("symbol", "?")
    to_amount = quote.amount(quote.to_amount, quote.to_token)
    to_min = quote.amount(quote.to_amount_min, quote.to_token)
    cross_chain = quote.to_chain_id != quote.from_chain_id
    quote_ttl = min(settings.SWAP_QUOTE_TTL_SECONDS, settings.ACTION_TTL_SECONDS)
    params = {
        "from_asset_id": token.asset_id,
        "to_asset_id": request.to_asset_id,
        "amount": str(value),
        "symbol": token.symbol,
        "to_symbol": to_symbol,
        "to_amount": str(to_amount),
        "to_amount_min": str(to_min),
        "slippage": str(request.slippage_pct),
        "provider": quote.tool,
        "quote_id": quote.id,
        "cross_chain": cross_chain,
        # The action expires with the quote when the quote lapses first (signing refuses it).
        "quote_expires_at": rfc3339(timezone.now() + timedelta(seconds=quote_ttl)),
    }
    if cross_chain:
        params["to_chain_id"] = destination.id
        summary = (
            f"Swap {value} {token.symbol} on {chain.name} for at least {to_min} {to_symbol} "
            f"on {destination.name} (quoted {to_amount}) via {quote.tool}, slippage "
            f"{request.slippage_pct}%. Two legs: the action is executed when the source "
            f"transaction is mined on {chain.name}; the bridge then delivers on "
            f"{destination.name}, reported in the status history (destination leg)"
        )
    else:
        summary = (
            f"Swap {value} {token.symbol} for at least {to_min} {to_symbol} (quoted "
            f"{to_amount}) via {quote.tool} on {chain_name(chain.id)}, slippage "
            f"{request.slippage_pct}%"
        )
    return params, summary, quote_ttl


def propose_swap_signed_by_user(
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
        w3 = web3(chain.id)
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
        op = _build(client, call, params, chain=chain)
    with transaction.atomic():
        action = action_create(
            user=user,
            application=application,
            type=ActionType.SWAP,
            summary=summary,
            detail=f"proposed by the action tool; not under a spending permission: {permission_note}"
            if permission_note
            else None,
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


def propose_card_limit(
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
    value, units = _units(daily_limit, card.token.decimals)
    if units > zodiac.UINT128_MAX:
        raise ToolError("daily_limit is too large")
    account = _account(user, _chain(card.chain_id))
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


def propose_card_state(*, user, application, frozen: bool, card_id: str | None = None) -> Action:
    """card_freeze / card_unfreeze: off-chain; the passkey signs a SIWE message for the card's
    Safe (EIP-1271), which Gnosis Pay exchanges for the token that freezes or unfreezes."""

    card = _card(user, card_id)
    chain = _chain(card.chain_id)
    account = _account(user, chain)
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
        challenge = safe_message_hash(web3(chain.id), card.safe_address, eip191_hash(message))
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


@dataclass(frozen=True)
class TransferRequest:
    """A transfer's input, checked and resolved once (the name resolved on the asset's chain)."""

    token: Token
    value: Decimal
    units: int
    chain: Chain
    recipient: str
    name: str
    to: str

    @property
    def shown_to(self) -> str:
        return f"{self.name} ({self.recipient})" if self.name else self.recipient

    @property
    def summary(self) -> str:
        return (
            f"Send {self.value} {self.token.symbol} to {self.shown_to} on "
            f"{chain_name(self.token.chain_id)}"
        )

    def params(self) -> dict:
        params = {
            "asset_id": self.token.asset_id,
            "amount": str(self.value),
            "to": self.recipient,
            "symbol": self.token.symbol,
        }
        if self.name:
            # Both are kept: the address is what the user operation pays, the name what people
            # read ("to": the name was asked for; "reverse": the address's verified primary name).
            params["ens"] = self.name
            params["ens_source"] = (
                "reverse" if self.to.strip().lower() == self.recipient.lower() else "to"
            )
        return params


def transfer_request(*, asset_id: str, amount: str, to: str) -> TransferRequest:
    token = _token(asset_id)
    value, units = _units(amount, token.decimals)
    chain = _chain(token.chain_id)  # the asset id says which chain: its node, its bundler
    recipient, name = _recipient(to, chain)
    return TransferRequest(token, value, units, chain, recipient, name, to)


def _permission_params(reasons: Sequence[Reason]) -> dict:
    """The reasons a permission did not cover it: the agent's English note, and the codes the
    signing page translates (nothing when no permission was involved)."""
    if not reasons:
        return {}
    return {"permission_note": note_text(reasons), "permission_reasons": stored(reasons)}


def propose_transfer(
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
        w3 = web3(chain.id)
        account = _account(user, chain)
        client = passkey_client(w3, account)
        erc20 = w3.eth.contract(address=Web3.to_checksum_address(token.address), abi=_ERC20_ABI)
        call = client.execute(
            erc20.address,
            0,
            Web3.to_bytes(hexstr=erc20.encode_abi("transfer", [recipient, units])),
        )
        params = request.params()
        params.update(_permission_params(permission_reasons))
        op = _build(client, call, params, chain=chain)
    return action_create(
        user=user,
        application=application,
        type=ActionType.TRANSFER,
        summary=request.summary,
        detail=f"proposed by the action tool; not under a spending permission: {permission_note}"
        if permission_note
        else None,
        chain_id=token.chain_id,
        smart_account=account.address,
        params=params,
        user_op=op,
        entry_point_version=account.entry_point_version,
    )


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
