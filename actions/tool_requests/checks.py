"""What a transfer or swap asks, checked and built, before anything is proposed: the asset, the
amount, the recipient (an address or an ENS name), the user's Picnic account on that chain, the
swap quote, and the user operation with gas from the bundler. `ToolError` is what an action
tool refuses. The entries that use these are proposals/services.py and the spending
permissions (grants.py, spending.py, revoking.py)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.utils import timezone
from web3 import Web3

from actions.accounts.models import SmartAccount, SmartAccountKind, Token
from actions.accounts.public import smart_accounts_cover_chains
from actions.chain_reads import CHAIN_RPC_ERRORS
from actions.evm_clients import bundler_client
from actions.providers.lifi import ProviderUnavailable, QuoteError, lifi_client
from core.api import failure_reason
from core.chains import Chain, UnknownChain, chain_name, get_chain
from core.errors import DomainError, redact
from core.formats import rfc3339
from core.metrics import instrument_web3
from evm import ens
from evm.bundler import BundlerError
from evm.passkey_account import PasskeyAccountClient
from evm.rpc import http_web3

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


def token_of(asset_id: str) -> Token:
    match = ASSET_ID.fullmatch(asset_id or "")
    if not match:
        raise ToolError(
            f"asset_id must be a CAIP-19 ERC-20 id (eip155:<chain>/erc20:<address>), got {asset_id!r}"
        )
    token = Token.objects.filter(chain_id=int(match[1]), address__iexact=match[2]).first()
    if token is None:
        raise ToolError(f"Unknown token: {asset_id}")
    chain_of(token.chain_id)  # a token row of a chain no longer served is refused here
    return token


def chain_of(chain_id: int) -> Chain:
    try:
        return get_chain(chain_id)
    except UnknownChain:
        raise ToolError(f"chain {chain_id} is not served here") from None


def units_of(amount: str, decimals: int) -> tuple[Decimal, int]:
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


def recipient_of(to: str, chain: Chain) -> tuple[str, str]:
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


def picnic_account(user, chain: Chain) -> SmartAccount:
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
        return picnic_account(user, chain)  # a chain added to the table since they registered
    if account is None:
        raise ToolError(
            f"No Picnic smart account on {chain.name}: the user must register a passkey first"
        )
    return account


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


def op_with_gas(client, call: str, params: dict, *, chain: Chain) -> dict:
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
    token = token_of(from_asset_id)
    to_match = ASSET_ID.fullmatch(to_asset_id or "")
    if not to_match:
        raise ToolError(f"to_asset_id must be a CAIP-19 ERC-20 id, got {to_asset_id!r}")
    if to_asset_id.lower() == token.asset_id.lower():
        raise ToolError("from_asset_id and to_asset_id are the same token")
    destination = chain_of(int(to_match[1]))
    value, units = units_of(amount, token.decimals)
    slippage_pct = _slippage(slippage)
    chain = chain_of(token.chain_id)
    return SwapRequest(
        token=token,
        chain=chain,
        destination=destination,
        account=picnic_account(user, chain),
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
        quote = lifi_client().quote(
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
    token = token_of(asset_id)
    value, units = units_of(amount, token.decimals)
    chain = chain_of(token.chain_id)  # the asset id says which chain: its node, its bundler
    recipient, name = recipient_of(to, chain)
    return TransferRequest(token, value, units, chain, recipient, name, to)
