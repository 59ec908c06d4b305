"""What the signing page shows about an action, in plain words: the chain by name, token
amounts with their fiat value (from the price source; "price unavailable" when it fails), the
recipient short and in full, a swap's pay/receive, the network fee. Reads only; the page
formats the numbers in the user's language (core/l10n.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_UP, Decimal

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from eth_utils import is_address, to_checksum_address

from actions.models import Action, ActionType, Token
from actions.providers.prices import PriceError, prices
from core import l10n
from core.chains import Chain, NativeCurrency, UnknownChain, get_chain

_ASSET_ID = re.compile(r"eip155:([1-9][0-9]{0,19})/erc20:(0x[0-9a-fA-F]{40})")


def chain_for(chain_id: int) -> Chain:
    """The action's chain from the one chain table (core.chains); a chain not in it still
    reads as words ("Network 5", translated) with the generic icon and no native coin."""
    try:
        return get_chain(chain_id)
    except UnknownChain:
        return Chain(
            id=int(chain_id),
            name=str(_("Network %(id)s") % {"id": chain_id}),
            rpc_url="",
            bundler_url=None,
            native=NativeCurrency(symbol="", name=""),
        )


@dataclass(frozen=True)
class Value:
    """An amount of a token (or the native coin) and, when the price source answered, its
    worth in the page's fiat currency."""

    amount: Decimal
    symbol: str
    fiat: Decimal | None
    currency: str


@dataclass(frozen=True)
class Address:
    full: str  # checksummed
    short: str  # 0x15d3…6A65, the way address books and wallets show it
    ens: str = ""
    own: bool = False  # one of the user's own accounts


def address(value: str, *, ens: str = "", own_addresses: set[str] = frozenset()) -> Address:
    full = to_checksum_address(value) if is_address(value or "") else (value or "")
    short = f"{full[:6]}…{full[-4:]}" if len(full) == 42 else full
    return Address(full=full, short=short, ens=ens, own=full.lower() in own_addresses)


def _int(value) -> int:
    if isinstance(value, str):
        return int(value, 16) if value.startswith("0x") else int(value or 0)
    return int(value or 0)


def _token(asset_id: str | None) -> Token | None:
    match = _ASSET_ID.fullmatch(asset_id or "")
    if not match:
        return None
    return Token.objects.filter(chain_id=int(match[1]), address__iexact=match[2]).first()


def _fee(action: Action) -> tuple[Decimal, bool] | None:
    """The most the network fee can be (gas limits × max fee per gas), in the native coin, and
    whether a paymaster pays it; None for actions that are not user operations."""
    op = action.user_op or {}
    if not op or "maxFeePerGas" not in op:
        return None
    try:
        gas = sum(
            _int(op.get(key))
            for key in (
                "callGasLimit",
                "verificationGasLimit",
                "preVerificationGas",
                "paymasterVerificationGasLimit",
                "paymasterPostOpGasLimit",
            )
        )
        wei = gas * _int(op["maxFeePerGas"])
    except (ValueError, TypeError):
        return None
    paymaster = op.get("paymaster") or (op.get("paymasterAndData") or "0x")[2:]
    # Rounded up: the page never shows less than the most it can cost.
    most = Decimal(wei).scaleb(-18).quantize(Decimal("1e-8"), rounding=ROUND_UP)
    return most, bool(paymaster)


def sign_facts(action: Action) -> dict:
    params = action.params or {}
    chain = chain_for(action.chain_id)
    currency = l10n.fiat_currency()
    tokens = {key: _token(params.get(key)) for key in ("asset_id", "from_asset_id", "to_asset_id")}
    price_ids = sorted({t.price_id for t in tokens.values() if t and t.price_id})
    fee = _fee(action)
    price_table: dict = {}
    price_error = ""
    try:
        price_table = prices(price_ids)
    except PriceError as exc:
        price_error = str(exc)
    if fee and not fee[1] and chain.native.price_id and not price_error:
        # Asked apart: a source without the native coin still values the tokens.
        try:
            price_table |= prices([chain.native.price_id])
        except PriceError:
            pass

    def value(amount, symbol: str, price_id: str | None) -> Value | None:
        number = l10n.finite_decimal(amount)
        if number is None:
            return None
        price = price_table.get(price_id or "", {}).get(currency)
        fiat = (number * price).quantize(Decimal("0.01")) if price is not None else None
        return Value(amount=number, symbol=symbol, fiat=fiat, currency=currency)

    def price_id(key: str) -> str:
        token = tokens.get(key)
        return token.price_id if token else ""

    own = {a.lower() for a in action.user.smart_accounts.values_list("address", flat=True)}
    facts: dict = {
        "chain": chain,
        "currency": currency,
        "price_error": price_error,
        "account": address(action.smart_account),
    }
    if action.type == ActionType.TRANSFER:
        facts["amount"] = value(
            params.get("amount"), params.get("symbol", ""), price_id("asset_id")
        )
        facts["recipient"] = address(
            params.get("to", ""), ens=params.get("ens", ""), own_addresses=own
        )
    elif action.type == ActionType.SWAP:
        facts["pay"] = value(
            params.get("amount"), params.get("symbol", ""), price_id("from_asset_id")
        )
        to_symbol, to_price = params.get("to_symbol", ""), price_id("to_asset_id")
        facts["receive_min"] = value(params.get("to_amount_min"), to_symbol, to_price)
        facts["receive_quoted"] = value(params.get("to_amount"), to_symbol, to_price)
        facts["provider"] = params.get("provider", "")
        facts["cross_chain"] = bool(params.get("cross_chain"))
        facts["slippage"] = l10n.finite_decimal(params.get("slippage"))
    elif action.type == ActionType.CARD_LIMIT_SET:
        facts["daily_limit"] = value(
            params.get("daily_limit"), params.get("symbol", ""), price_id("asset_id")
        )
        facts["cooldown_seconds"] = settings.CARD_DELAY_COOLDOWN_SECONDS
        if action.broadcast_at:  # queued in the delay module: the cooldown runs from then
            facts["takes_effect_at"] = action.broadcast_at + timedelta(
                seconds=settings.CARD_DELAY_COOLDOWN_SECONDS
            )
    if fee:
        amount, sponsored = fee
        facts["fee"] = value(amount, chain.native.symbol, chain.native.price_id)
        facts["fee_sponsored"] = sponsored
    return facts
