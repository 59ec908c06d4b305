"""What the signing page shows about an action, in plain words: who asks (the agent, since
when, whether this is its first request), who receives (a name with the full address, a
first-time recipient, an address that looks like a known one), what changes (the balance
before and after), the chain by name, token amounts with their fiat value (from the price
source; "price unavailable" when it fails), a swap's pay/receive, the network fee. Names that
come from outside (OAuth clients, ENS) are length-limited and checked for Picnic's name, bidi
controls and mixed alphabets. Reads only; the page formats the numbers in the user's language
(core/l10n.py)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_UP, Decimal

from django.conf import settings
from django.db.models import Q
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from eth_utils import is_address, to_checksum_address
from oauth2_provider.models import get_access_token_model, get_refresh_token_model

from actions.accounts.models import Token
from actions.chain_reads import CHAIN_RPC_ERRORS, token_balance
from actions.execution.models import Action, ActionStatus, ActionType
from actions.history.models import TokenTransfer
from actions.permissions.public import CODES
from actions.providers.prices import PriceError, prices
from core import l10n
from core.agent_logos import agent_logo_url
from core.chains import Chain, NativeCurrency, UnknownChain, chain_name, get_chain

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
    asset_id: str = ""  # shown on hover beside the symbol


# --- Names from outside: OAuth clients' own words, ENS names ---------------------------------

NAME_MAX = 40  # characters shown of a name we did not choose; all of it on hover
# Format controls that reorder or hide text (bidi embeddings, overrides and isolates,
# zero-width characters): a name with one can read differently from what it is.
_BIDI = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"}
# Letters of other alphabets (and digits) that pass for Latin ones, to find our own name
# written with them: "Pіcnіc" (Cyrillic і), "P1cn1c".
_LOOKALIKES = str.maketrans(
    {
        "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "і": "i", "ӏ": "l", "к": "k",
        "ο": "o", "ι": "i", "κ": "k", "ρ": "p", "ν": "v", "0": "o", "1": "i", "!": "i", "|": "l",
    }
)  # fmt: skip
OUR_NAME = "picnic"
UNTRUSTED_OURS = _(
    "It uses Picnic's name, but it is not Picnic: Picnic's own messages never come from an agent."
)
UNTRUSTED_HIDDEN = _("Its name contains invisible characters that can change how it reads.")
UNTRUSTED_MIXED = _("Its name mixes letters of different alphabets that look alike.")


@dataclass(frozen=True)
class OutsideName:
    shown: str  # control characters removed, at most NAME_MAX characters
    full: str  # control characters removed, for the hover text
    untrusted: str  # why it may not be what it says ("" when nothing was found)


def outside_name(value: str, *, limit: int = NAME_MAX) -> OutsideName:
    """A name someone else chose, safe to show: without control or format characters, cut to
    `limit`, and flagged when it borrows Picnic's name, hides characters or mixes alphabets.
    The template escapes it (autoescape) and isolates it (<bdi>)."""
    value = value or ""
    hidden = any(
        unicodedata.bidirectional(ch) in _BIDI or unicodedata.category(ch) == "Cf" for ch in value
    )
    clean = "".join(ch for ch in value if unicodedata.category(ch) not in ("Cc", "Cf")).strip()
    scripts = {unicodedata.name(ch, "?").split()[0] for ch in clean if ch.isalpha()}
    skeleton = re.sub(
        r"[^a-z]", "", unicodedata.normalize("NFKC", clean).casefold().translate(_LOOKALIKES)
    )
    if OUR_NAME in skeleton:
        why = UNTRUSTED_OURS
    elif hidden:
        why = UNTRUSTED_HIDDEN
    elif len(scripts) > 1:
        why = UNTRUSTED_MIXED
    else:
        why = ""
    shown = clean if len(clean) <= limit else clean[: limit - 1] + "…"
    return OutsideName(shown=shown, full=clean, untrusted=str(why))


# --- Who asks ---------------------------------------------------------------------------------

# An agent connected less than this long ago is "newly connected": its first request is flagged.
NEW_AGENT = timedelta(days=7)


@dataclass(frozen=True)
class Agent:
    name: OutsideName
    initial: str  # the monogram shown until (or unless) we hold the agent's logo
    logo_url: str | None  # the agent's logo, fetched and served from our own origin
    client_id: str
    connected_at: datetime | None
    first_request: bool  # the first request of an agent connected within NEW_AGENT


def _connected_at(action: Action) -> datetime | None:
    """When the user connected the agent: its oldest token still held."""
    times = [
        model.objects.filter(user_id=action.user_id, application_id=action.application_id)
        .order_by("created")
        .values_list("created", flat=True)
        .first()
        for model in (get_access_token_model(), get_refresh_token_model())
    ]
    times = [t for t in times if t is not None]
    return min(times) if times else None


def agent(action: Action) -> Agent | None:
    application = action.application
    if application is None:
        return None
    name = outside_name(application.name or application.client_id)
    connected = _connected_at(action)
    earlier = Action.objects.filter(
        user_id=action.user_id,
        application_id=action.application_id,
        created_at__lt=action.created_at,
    ).exists()
    new = connected is None or action.created_at - connected < NEW_AGENT
    return Agent(
        name=name,
        initial=(name.shown[:1] or "?").upper(),
        logo_url=agent_logo_url(application.pk),
        client_id=application.client_id,
        connected_at=connected,
        first_request=new and not earlier,
    )


# --- Who receives -----------------------------------------------------------------------------


def known_addresses(action: Action) -> set[str]:
    """Addresses the user has dealt with (lowercase): their own accounts, the recipients of
    their earlier transfers, and the counterparts of their accounts' token transfers."""
    own = {a.lower() for a in action.user.smart_accounts.values_list("address", flat=True)}
    sent = (
        Action.objects.filter(user_id=action.user_id, type=ActionType.TRANSFER)
        .exclude(pk=action.pk)
        .exclude(status__in=[ActionStatus.PROPOSED, ActionStatus.EXPIRED, ActionStatus.REJECTED])
        .values_list("params__to", flat=True)[:500]
    )
    known = own | {str(to).lower() for to in sent if to}
    if own:
        rows = TokenTransfer.objects.filter(from_address__in=own).values_list(
            "to_address", flat=True
        )[:500]
        known |= {str(a).lower() for a in rows}
        rows = TokenTransfer.objects.filter(to_address__in=own).values_list(
            "from_address", flat=True
        )[:500]
        known |= {str(a).lower() for a in rows}
    return known


def lookalike(full: str, known: set[str]) -> str | None:
    """A known address that is not `full` but starts and ends with the same four characters:
    what an address-poisoning attack plants in a history for the user to copy."""
    target = full.lower()
    if len(target) != 42:
        return None
    for other in sorted(known):
        if other != target and other[2:6] == target[2:6] and other[-4:] == target[-4:]:
            return to_checksum_address(other) if is_address(other) else other
    return None


# --- What changes -----------------------------------------------------------------------------


def _balance(action: Action, token: Token | None) -> Decimal | None:
    """The account's balance of `token` now, or None when the node cannot say."""
    if token is None or not is_address(action.smart_account or ""):
        return None
    try:
        units = token_balance(action.chain_id, token.address, action.smart_account)
    except CHAIN_RPC_ERRORS:
        return None
    return Decimal(units).scaleb(-token.decimals)


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


def valued(amount, symbol: str, price: Decimal | None, asset_id: str = "") -> Value | None:
    """`amount` of `symbol` and its worth at `price` (a price in the page's fiat currency, None
    when the price source did not answer); None when `amount` is not a number."""
    number = l10n.finite_decimal(amount)
    if number is None:
        return None
    fiat = (number * price).quantize(Decimal("0.01")) if price is not None else None
    return Value(
        amount=number, symbol=symbol, fiat=fiat, currency=l10n.fiat_currency(), asset_id=asset_id
    )


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

    def value(amount, symbol: str, price_id: str | None, asset_id: str = "") -> Value | None:
        return valued(amount, symbol, price_table.get(price_id or "", {}).get(currency), asset_id)

    def change(key: str, spent: Value | None) -> dict | None:
        """The balance of the token spent, before and after, while it can still be signed."""
        token = tokens.get(key)
        if action.status != ActionStatus.PROPOSED or token is None or spent is None:
            return None
        before = _balance(action, token)
        if before is None:
            return {"unavailable": True}
        after = before - spent.amount
        return {
            "before": value(before, token.symbol, token.price_id, token.asset_id),
            "after": value(after, token.symbol, token.price_id, token.asset_id),
            "short": after < 0,
        }

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
    if action.type == ActionType.SPEND_REVOKE:
        # The user asked for this one (their Spending permissions or Connected agents page):
        # no "Asked by" agent; the agents whose permissions end are named instead.
        facts["agent"] = None
        facts["revoked_agents"] = sorted(
            {
                outside_name(p.application.name or p.application.client_id).shown
                for p in action.revoked_permissions.select_related("application")
            }
        )
    else:
        facts["agent"] = agent(action)
    if action.type == ActionType.TRANSFER:
        facts["amount"] = value(
            params.get("amount"),
            params.get("symbol", ""),
            price_id("asset_id"),
            params.get("asset_id", ""),
        )
        recipient = address(params.get("to", ""), ens=params.get("ens", ""), own_addresses=own)
        facts["recipient"] = recipient
        facts["recipient_name"] = outside_name(recipient.ens, limit=60) if recipient.ens else None
        known = known_addresses(action)
        facts["first_time"] = not recipient.own and recipient.full.lower() not in known
        facts["lookalike"] = None if recipient.own else lookalike(recipient.full, known)
        facts["change"] = change("asset_id", facts["amount"])
    elif action.type == ActionType.SWAP:
        facts["pay"] = value(
            params.get("amount"),
            params.get("symbol", ""),
            price_id("from_asset_id"),
            params.get("from_asset_id", ""),
        )
        facts["change"] = change("from_asset_id", facts["pay"])
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
    elif action.type == ActionType.SPEND_GRANT:
        facts["permission_recipients"] = ", ".join(
            f"{r['name']} ({r['address']})" if r.get("name") else r["address"]
            for r in params.get("recipients", [])
        )
        facts["permission_starts_at"] = parse_datetime(params.get("starts_at") or "")
        facts["permission_expires_at"] = parse_datetime(params.get("expires_at") or "")
    if fee:
        amount, sponsored = fee
        facts["fee"] = value(amount, chain.native.symbol, chain.native.price_id)
        facts["fee_sponsored"] = sponsored
        # The first op from a new chain deploys the account (v0.7 `factory`, v0.6 `initCode`):
        # its gas is most of a large fee, which the page must explain.
        op = action.user_op or {}
        facts["fee_deploys"] = bool(op.get("factory") or (op.get("initCode") or "0x") != "0x")
        facts["fee_network"] = chain_name(action.chain_id)
    facts["permission_note"] = permission_note(params)
    return facts


# --- Why a spending permission did not cover it ----------------------------------------------

# The reasons the tool stored (actions/permissions/reasons.py), in the user's words;
# "%(name)s" is the permission's name, as the agent asked for it.
_REASONS = {
    "revoked": _("the spending permission “%(name)s” was revoked"),
    "expired": _("the spending permission “%(name)s” has expired"),
    "revoking": _("the spending permission “%(name)s” is being revoked"),
    "not_granted": _("the spending permission “%(name)s” is not active on the network yet"),
    "not_started": _("the spending permission “%(name)s” only starts on %(when)s"),
    "recipient": _(
        "%(recipient)s is not one of the recipients of the spending permission “%(name)s”"
    ),
    "allowance_unreadable": _(
        "what is left of the spending permission “%(name)s” could not be read from %(chain)s"
    ),
    "key_unavailable": _("the key of the spending permission “%(name)s” is no longer available"),
    "chain_refused": _("the network would refuse it under the spending permission “%(name)s”"),
    "cross_chain": _(
        "a swap to another network is never covered by a spending permission: what arrives "
        "there cannot be checked before it leaves"
    ),
    "wrong_pair": _(
        "the spending permission “%(name)s” only allows swapping %(symbol)s into %(to_symbol)s"
    ),
    "route": _(
        "the route of the price quote (%(tool)s) is not one the spending permission “%(name)s” "
        "allows"
    ),
    "route_value": _(
        "the route of the price quote would also spend the network's own coin, which a "
        "spending permission never covers"
    ),
}
# Over the allowance, by period: what is left is the period's remainder.
_OVER = {
    "daily": _(
        "it is more than the %(amount)s %(symbol)s left today of the spending permission “%(name)s”"
    ),
    "weekly": _(
        "it is more than the %(amount)s %(symbol)s left this week of the spending permission "
        "“%(name)s”"
    ),
    "monthly": _(
        "it is more than the %(amount)s %(symbol)s left this month of the spending permission "
        "“%(name)s”"
    ),
}


def _reason_text(reason: dict) -> str | None:
    """One stored reason in the user's language (None: a code this page cannot say)."""
    code = reason.get("code")
    values = {
        "name": outside_name(reason.get("name", "")).shown,
        "recipient": outside_name(reason.get("recipient", ""), limit=60).shown,
        "chain": reason.get("chain", ""),
        "symbol": reason.get("symbol", ""),
        "to_symbol": reason.get("to_symbol", ""),
        "tool": reason.get("tool", ""),
    }
    if code == "over_allowance":
        template = _OVER.get(reason.get("period", ""))
        values["amount"] = l10n.format_amount(reason.get("amount", ""))
    else:
        template = _REASONS.get(code) if code in CODES else None
    if code == "not_started":
        values["when"] = l10n.format_datetime(parse_datetime(reason.get("starts_at") or ""))
    return None if template is None else str(template) % values


def permission_note(params: dict) -> str:
    """Why the agent's spending permission did not cover this request, so the user signs it:
    the stored reasons in the user's language; the agent's English note when a reason cannot
    be said (kept from before reasons were stored); "" when no permission was involved."""
    reasons = params.get("permission_reasons") or []
    texts = [_reason_text(reason) for reason in reasons if isinstance(reason, dict)]
    if reasons and len(texts) == len(reasons) and None not in texts:
        why = "; ".join(texts)
    else:
        why = params.get("permission_note") or ""
    if not why:
        return ""
    return gettext(
        "Your agent's spending permission does not cover this request, so it needs your "
        "signature: %(why)s."
    ) % {"why": why}


# --- The activity list: each action in one line ----------------------------------------------

# The param that holds the amount of each type the list values, with its token's param.
_LISTED_AMOUNT = {
    ActionType.TRANSFER: ("amount", "asset_id"),
    ActionType.SWAP: ("amount", "from_asset_id"),
    ActionType.CARD_LIMIT_SET: ("daily_limit", "asset_id"),
}


def _tokens(asset_ids: set[str]) -> dict[str, Token]:
    """{asset id: token} for the CAIP-19 ids of known tokens, in one query."""
    matches = [m for m in map(_ASSET_ID.fullmatch, sorted(asset_ids)) if m]
    if not matches:
        return {}
    where = Q()
    for m in matches:
        where |= Q(chain_id=int(m[1]), address__iexact=m[2])
    found = {(t.chain_id, t.address.lower()): t for t in Token.objects.filter(where)}
    keys = {m[0]: (int(m[1]), m[2].lower()) for m in matches}
    return {asset_id: found[key] for asset_id, key in keys.items() if key in found}


def activity_facts(actions: list[Action]) -> dict:
    """What the activity list says of each action, {pk: facts}, in the signing page's terms:
    its network by name, the amount with its fiat value, a transfer's recipient (its ENS name
    beside the short address), a swap's token bought and, across networks, where it arrives,
    a spending permission's name. The tokens are read in one query and the prices asked once
    for the whole list, so the page does not grow by a query a row; when the price source
    fails, the amounts stand alone (they are exact)."""
    tokens = _tokens(
        {(a.params or {}).get(key[1]) or "" for a in actions if (key := _LISTED_AMOUNT.get(a.type))}
    )
    currency = l10n.fiat_currency()
    try:
        price_table = prices([t.price_id for t in tokens.values() if t.price_id])
    except PriceError:
        price_table = {}
    facts = {}
    for action in actions:
        params = action.params or {}
        row: dict = {"chain": chain_for(action.chain_id).name}
        if key := _LISTED_AMOUNT.get(action.type):
            asset_id = params.get(key[1]) or ""
            token = tokens.get(asset_id)
            price = price_table.get(token.price_id, {}).get(currency) if token else None
            symbol = params.get("symbol") or (token.symbol if token else "")
            row["amount"] = valued(params.get(key[0]), symbol, price, asset_id)
        if action.type == ActionType.TRANSFER:
            recipient = address(params.get("to", ""), ens=params.get("ens", ""))
            row["recipient"] = recipient
            row["recipient_name"] = outside_name(recipient.ens, limit=60) if recipient.ens else None
        elif action.type == ActionType.SWAP:
            row["to_symbol"] = params.get("to_symbol", "")
            if params.get("cross_chain") and isinstance(params.get("to_chain_id"), int):
                row["to_chain"] = chain_for(params["to_chain_id"]).name
        elif action.type == ActionType.SPEND_GRANT:
            row["permission_names"] = [outside_name(params.get("name", "")).shown]
        elif action.type == ActionType.SPEND_REVOKE:
            row["permission_names"] = [outside_name(n).shown for n in params.get("names", [])]
        if "permission_names" in row:
            row["permission_names"] = [n for n in row["permission_names"] if n]
        facts[action.pk] = row
    return facts
