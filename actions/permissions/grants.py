"""Asking for a spending permission: the agent's request checked whole (token, pair, recipients,
period, window, routers) and its `spendGrant` action created for the passkey to sign. What an
agent may then spend under it is spending.py; revoking it is revoking.py
([spending permissions](docs/spend-permissions.md))."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from web3 import Web3

from actions.accounts.models import SmartAccount, Token
from actions.evm_clients import on_chain, tool_web3
from actions.execution.models import Action, ActionType
from actions.execution.public import action_create
from actions.permissions import session_keys
from actions.permissions.models import (
    PERIOD_SECONDS,
    SPEND_PERMISSION_LIFECYCLE,
    SPEND_PERMISSION_LIVE,
    SpendPeriod,
    SpendPermission,
)
from actions.providers.lifi import ProviderUnavailable, QuoteError, lifi_client
from actions.tool_requests.public import (
    ToolError,
    chain_of,
    op_with_gas,
    passkey_client,
    picnic_account,
    recipient_of,
    token_of,
    units_of,
)
from core.chains import chain_name
from core.echo import prefix
from core.formats import rfc3339
from core.lifecycle import Actor, create
from core.schema import parse_date_time
from evm import spend_permission as chain_permission

UINT160_MAX = 2**160 - 1
UINT48_MAX = 2**48 - 1
MAX_RECIPIENTS = 20
# How far in the past a start may be said (clock skew): it is then "now".
START_SKEW = timedelta(minutes=5)
PERIOD_WORDS = {SpendPeriod.DAILY: "day", SpendPeriod.WEEKLY: "week", SpendPeriod.MONTHLY: "month"}


def agent_name(application) -> str:
    return application.name or application.client_id


def _when(value: str | None, field: str) -> datetime | None:
    if value in (None, ""):
        return None
    # The contract checked it already (core.schema.FORMATS); strict again so that a caller
    # past the contract cannot raise here with 30 February.
    parsed = parse_date_time(value) if isinstance(value, str) else None
    if parsed is None:
        raise ToolError(
            f"{field} must be an RFC 3339 date-time with a time zone, like "
            f"2027-03-31T00:00:00Z, got {prefix(value)}",
            errors={field: ["not an RFC 3339 date-time with a time zone"]},
        )
    return parsed


@dataclass(frozen=True)
class Window:
    starts_at: datetime
    expires_at: datetime


def _window(starts_at: str | None, expires_at: str | None) -> Window:
    now = timezone.now()
    start = _when(starts_at, "starts_at")
    end = _when(expires_at, "expires_at")
    if end is None:
        raise ToolError("expires_at is required: a permission always ends")
    if start is None or (start < now and start >= now - START_SKEW):
        start = now
    if start < now:
        raise ToolError("starts_at is in the past", errors={"starts_at": ["in the past"]})
    if end <= now:
        raise ToolError("expires_at is in the past", errors={"expires_at": ["in the past"]})
    if end <= start:
        raise ToolError(
            "expires_at must be after starts_at", errors={"expires_at": ["before starts_at"]}
        )
    if end - start > timedelta(days=settings.SPEND_PERMISSION_MAX_DAYS):
        raise ToolError(
            f"a permission lasts at most {settings.SPEND_PERMISSION_MAX_DAYS} days",
            errors={"expires_at": ["too far"]},
        )
    if int(end.timestamp()) > UINT48_MAX:
        raise ToolError("expires_at is too far in the future")
    return Window(start, end)


def _recipients(
    names: list[str] | None, any_recipient: bool, chain, *, swaps: bool = False
) -> list[dict]:
    names = list(names or [])
    if any_recipient and names:
        raise ToolError(
            "give either recipients or any_recipient: true, not both",
            code="recipients_conflict",
        )
    if any_recipient or (swaps and not names):  # a pair alone: a permission that only swaps
        return []
    if not names:
        raise ToolError(
            "recipients is empty: name at least one recipient (0x address or ENS name), or set "
            "any_recipient: true to allow any",
            code="recipients_empty",
            errors={"recipients": ["empty"]},
        )
    if len(names) > MAX_RECIPIENTS:
        raise ToolError(f"at most {MAX_RECIPIENTS} recipients")
    resolved: dict[str, dict] = {}
    for name in names:
        address, shown = recipient_of(name, chain)
        resolved.setdefault(address.lower(), {"address": address, "name": shown})
    return list(resolved.values())


def recipients_text(recipients: list[dict]) -> str:
    """merchant.eth (0x…full…), 0x…: the name next to the full address."""
    return ", ".join(
        f"{r['name']} ({r['address']})" if r.get("name") else r["address"] for r in recipients
    )


def grant_words(
    *,
    agent: str,
    amount,
    symbol: str,
    period: str,
    recipients: list[dict],
    any_recipient: bool,
    to_symbol: str | None,
) -> str:
    """ "A may send up to 50 USDC per week to B", "A may swap up to 50 USDC per week into EURe",
    or both ("…, or swap it into EURe")."""
    per = f"{amount} {symbol} per {PERIOD_WORDS[period]}"
    if not recipients and not any_recipient:
        return f"{agent} may swap up to {per} into {to_symbol}"
    to = recipients_text(recipients) if recipients else "anyone"
    words = f"{agent} may send up to {per} to {to}"
    return f"{words}, or swap it into {to_symbol}" if to_symbol else words


def permission_sentence(permission: SpendPermission) -> str:
    """The permission in plain words (English; the pages translate their own)."""
    words = grant_words(
        agent=agent_name(permission.application),
        amount=permission.allowance,
        symbol=permission.token.symbol,
        period=permission.period,
        recipients=[] if permission.any_recipient else permission.recipients,
        any_recipient=permission.any_recipient,
        to_symbol=permission.to_token.symbol if permission.to_token_id else None,
    )
    return f"{words} until {permission.expires_at:%d %b %Y %H:%M} UTC"


def _pair(token: Token, to_asset_id: str | None, chain, account: SmartAccount, units: int):
    """(the pair's output token, the routers its swaps may use), or (None, []) without a pair.
    The router is the quote provider's contract for this pair, asked now; its route must pull
    the tokens itself (the approval goes to the contract called) and carry no value."""
    if not to_asset_id:
        return None, []
    to_token = token_of(to_asset_id)
    if to_token.chain_id != token.chain_id:
        raise ToolError(
            f"to_asset_id is on another chain ({chain_name(to_token.chain_id)}): a permission "
            "covers same-chain swaps only, since a bridge's output cannot be checked on the "
            "source chain; cross-chain swaps are signed by the user each time",
            code="pair_cross_chain",
            errors={"to_asset_id": ["another chain"]},
        )
    if to_token.pk == token.pk:
        raise ToolError(
            "to_asset_id is the permission's own token", errors={"to_asset_id": ["same token"]}
        )
    try:
        quote = lifi_client().quote(
            from_chain=chain.id,
            to_chain=chain.id,
            from_token=token.address,
            to_token=to_token.address,
            from_amount=units,
            from_address=account.address,
            slippage_percent=Decimal("0.5"),
        )
    except ProviderUnavailable:
        raise  # an outage, not the input's fault: the view answers 503
    except QuoteError as exc:
        raise ToolError(
            f"no swap route for {token.symbol} → {to_token.symbol}: {exc}", code="pair_no_route"
        ) from None
    if quote.approval_address.lower() != quote.tx_to.lower() or quote.tx_value:
        raise ToolError(
            f"the {token.symbol} → {to_token.symbol} route ({quote.tool}) is not one a "
            "permission can cover (it pays value, or pulls the tokens through another contract)",
            code="pair_no_route",
        )
    return to_token, [Web3.to_checksum_address(quote.tx_to)]


def _within_cap(*, user, application) -> None:
    open_count = SpendPermission.objects.filter(
        user=user, application=application, status__in=SPEND_PERMISSION_LIVE
    ).count()
    if open_count >= settings.SPEND_PERMISSIONS_PER_AGENT:
        raise ToolError(
            f"this agent already holds {open_count} open permissions on this account (the most "
            "allowed): the user must revoke one first",
            code="too_many_permissions",
        )


def spend_permission_request(
    *,
    user,
    application,
    asset_id: str,
    amount: str,
    period: str,
    expires_at: str,
    recipients: list[str] | None = None,
    any_recipient: bool = False,
    starts_at: str | None = None,
    purpose: str = "",
    name: str = "",
    to_asset_id: str | None = None,
) -> Action:
    """Check the request whole, then propose the grant (a `spendGrant` action) and record the
    permission `requested`. Nothing is installed until the user signs."""
    if period not in SpendPeriod.values:
        raise ToolError(f"period must be one of {', '.join(SpendPeriod.values)}, got {period!r}")
    token = token_of(asset_id)
    value, units = units_of(amount, token.decimals)
    if units > UINT160_MAX:
        raise ToolError(
            "amount is too large for a permission (more than 2**160 - 1 units per period)",
            errors={"amount": ["too large"]},
        )
    window = _window(starts_at, expires_at)
    chain = chain_of(token.chain_id)
    listed = _recipients(recipients, any_recipient, chain, swaps=bool(to_asset_id))
    _within_cap(user=user, application=application)
    account = picnic_account(user, chain)
    with on_chain(chain):
        to_token, routers = _pair(token, to_asset_id, chain, account, units)
    session_address, session_key = chain_permission.new_session_key()
    permission_id = chain_permission.permission_id()
    name = (name or purpose or f"{value} {token.symbol} per {PERIOD_WORDS[period]}")[:100]
    params = {
        "asset_id": token.asset_id,
        "symbol": token.symbol,
        "allowance": str(value),
        "units": str(units),
        "period": period,
        "recipients": listed,
        "any_recipient": bool(any_recipient),
        "starts_at": rfc3339(window.starts_at),
        "expires_at": rfc3339(window.expires_at),
        "purpose": purpose,
        "name": name,
        "permission_id": "0x" + permission_id.hex(),
        "session_key": session_address,
    }
    if to_token is not None:
        params.update(
            to_asset_id=to_token.asset_id, to_symbol=to_token.symbol, routers=list(routers)
        )
    with on_chain(chain):
        client = passkey_client(tool_web3(chain.id), account)
        try:
            grant = chain_permission.grant_call(
                client,
                permission_id=permission_id,
                session_key=session_address,
                token=token.address,
                allowance=units,
                period_seconds=PERIOD_SECONDS[period],
                start=int(window.starts_at.timestamp()),
                end=int(window.expires_at.timestamp()),
                recipients=[r["address"] for r in listed],
                any_recipient=bool(any_recipient),
                to_token=to_token.address if to_token is not None else None,
                routers=routers,
            )
        except chain_permission.InvalidGrant as exc:  # what the contract would refuse
            raise ToolError(str(exc)) from None
        op = op_with_gas(client, grant, params, chain=chain)
    words = grant_words(
        agent=agent_name(application),
        amount=value,
        symbol=token.symbol,
        period=period,
        recipients=listed,
        any_recipient=bool(any_recipient),
        to_symbol=to_token.symbol if to_token is not None else None,
    )
    summary = (
        f"{words} on {chain_name(chain.id)} until {window.expires_at:%d %b %Y %H:%M} UTC, "
        "without asking you each time"
    )
    with transaction.atomic():
        # The cap holds under concurrency: requests of one user queue on the user's row, so
        # each counts what the ones before it inserted (the count above only spares the chain
        # work of an obvious refusal). NO KEY: rows that merely point at the user (history,
        # other actions) are not held up.
        get_user_model().objects.select_for_update(no_key=True).filter(pk=user.pk).first()
        _within_cap(user=user, application=application)
        action = action_create(
            user=user,
            application=application,
            type=ActionType.SPEND_GRANT,
            summary=summary,
            chain_id=chain.id,
            smart_account=account.address,
            params=params,
            user_op=op,
            entry_point_version=account.entry_point_version,
        )
        permission = create(
            lifecycle=SPEND_PERMISSION_LIFECYCLE,
            actor=Actor.agent(),
            detail=f"asked by {agent_name(application)}: {purpose}"[:2000],
            values={
                "user": user,
                "account": account,
                "chain_id": chain.id,
                "token": token,
                "application": application,
                "name": name,
                "purpose": purpose,
                "allowance_units": str(units),
                "allowance": str(value),
                "period": period,
                "recipients": listed,
                "any_recipient": bool(any_recipient),
                "to_token": to_token,
                "routers": routers,
                "starts_at": window.starts_at,
                "expires_at": window.expires_at,
                "permission_id": "0x" + permission_id.hex(),
                "session_key_address": session_address,
                "session_key_encrypted": session_keys.seal(session_key),
                "grant_action": action,
            },
        )
        Action.objects.filter(pk=action.pk).update(spend_permission=permission)
        action.spend_permission = permission
    return action
