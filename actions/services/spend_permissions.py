"""Spending permissions: an agent spends within limits the user signed once.

An agent asks (`spend_permission_request`, the MCP tool `request_spend_permission`): the
request is checked whole, a session key is made for this grant only (sealed at rest,
session_keys.py), and a `spendGrant` action carries the user operation in which the passkey
account calls `grantPermission` on itself. The user signs it on the usual signing page; the
usual submission and reconciliation follow (kinds.SpendGrant), and the permission follows its
action (`spend_permission_follow`): granting once signed, active once included.

Under an active permission, a `transfer` of the permission's agent, token, recipient and
window that the chain's `spendable` covers is signed by the server with the session key
(`transfer_under_permission`): the op calls `executePermitted`, which the contract checks
again (allowance per period, window, recipient) and records. Anything else falls back to the
passkey with the reason.

A permission may also name a pair, token → to_token on the same chain: a `swap` of that pair
within it (`swap_under_permission`) calls `executePermittedSwap` through one of the routers
named at the grant (the quote provider's contract, asked when the agent asks), and the account
reverts unless the output arrives in it. A cross-chain pair is refused: a bridge's output cannot
be checked on the source chain.

Revoking (the user's page, or disconnecting the agent) destroys the session key at once, then
a `spendRevoke` action calls `revokePermission` on chain with one passkey signature. The sweep
(beat) ends permissions past their expiry and follows grants and revocations whose action
ended outside the worker (expired, rejected)."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from web3 import Web3

from actions.chain_reads import CHAIN_RPC_ERRORS
from actions.evm_clients import ChainUnavailable, bundler_client, on_chain
from actions.models import (
    ACTION_LIFECYCLE,
    PERIOD_SECONDS,
    SPEND_PERMISSION_LIFECYCLE,
    SPEND_PERMISSION_LIVE,
    Action,
    ActionStatus,
    ActionType,
    SmartAccount,
    SpendPeriod,
    SpendPermission,
    Token,
)
from actions.presenters import decimal_string
from actions.providers.lifi import LifiClient, ProviderUnavailable, QuoteError
from actions.services import session_keys
from actions.services.lifecycle import action_create
from actions.services.permission_reasons import Reason
from actions.services.proposals import (
    SwapRequest,
    ToolError,
    TransferRequest,
    _account,
    _build,
    _chain,
    _recipient,
    _token,
    _units,
    passkey_client,
    propose_swap_signed_by_user,
    propose_transfer,
    swap_params,
    swap_quote,
    swap_request,
    transfer_request,
    web3,
)
from actions.services.signing import AGENT_DISCONNECTED
from actions.services.spend_follow import P, spend_permission_destroy_key, spend_permission_follow
from core.chains import chain_name, get_chain
from core.echo import prefix
from core.formats import rfc3339
from core.lifecycle import Actor, IllegalTransition, create, enqueue_on_commit, transition
from core.schema import parse_date_time
from evm import spend_permission as chain_permission
from evm.bundler import BundlerError

logger = logging.getLogger(__name__)

UINT160_MAX = 2**160 - 1
UINT48_MAX = 2**48 - 1
MAX_RECIPIENTS = 20
# How far in the past a start may be said (clock skew): it is then "now".
START_SKEW = timedelta(minutes=5)
PERIOD_WORDS = {SpendPeriod.DAILY: "day", SpendPeriod.WEEKLY: "week", SpendPeriod.MONTHLY: "month"}
# Statuses that hold a session key (the others never do: model constraint).
HOLDS_KEY = SPEND_PERMISSION_LIVE


def agent_name(application) -> str:
    return application.name or application.client_id


# --- asking --------------------------------------------------------------------------------


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
        address, shown = _recipient(name, chain)
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
    to_token = _token(to_asset_id)
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
        quote = LifiClient(
            settings.SWAP_QUOTE_URL, timeout=settings.SWAP_QUOTE_TIMEOUT_SECONDS
        ).quote(
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
    token = _token(asset_id)
    value, units = _units(amount, token.decimals)
    if units > UINT160_MAX:
        raise ToolError(
            "amount is too large for a permission (more than 2**160 - 1 units per period)",
            errors={"amount": ["too large"]},
        )
    window = _window(starts_at, expires_at)
    chain = _chain(token.chain_id)
    listed = _recipients(recipients, any_recipient, chain, swaps=bool(to_asset_id))
    _within_cap(user=user, application=application)
    account = _account(user, chain)
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
        client = passkey_client(web3(chain.id), account)
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
        op = _build(client, grant, params, chain=chain)
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


# --- revoking ----------------------------------------------------------------------------------


def spend_permissions_revoke(
    *, user, permission_ids, actor: Actor, why: str, withdrawn: str = ""
) -> list[Action]:
    """Destroy the keys at once, then propose one revocation per chain (one user operation
    calling `revokePermission` for each, batched) for the permissions granted on chain. A grant
    not yet signed is withdrawn instead. Returns the revoke actions to sign."""
    permissions = list(
        SpendPermission.objects.select_related("account__passkey", "application", "token")
        .filter(user=user, pk__in=list(permission_ids))
        .exclude(status__in=(P.REVOKED, P.EXPIRED, P.DECLINED, P.FAILED))
    )
    on_chain_now: dict[int, list[SpendPermission]] = {}
    for permission in permissions:
        with transaction.atomic():
            spend_permission_destroy_key(permission=permission, actor=actor, why=why)
        if permission.status == P.REQUESTED and permission.grant_action_id:
            grant = permission.grant_action
            try:
                transition(
                    lifecycle=ACTION_LIFECYCLE,
                    pk=grant.pk,
                    to=ActionStatus.REJECTED,
                    actor=actor,
                    only_from={ActionStatus.PROPOSED},
                    # `withdrawn` (a code) is what the grant's signing page says happened.
                    updates={"params": {**grant.params, "withdrawn": withdrawn}}
                    if withdrawn
                    else None,
                    detail=f"withdrawn: {why}",
                )
            except IllegalTransition:
                pass
            spend_permission_follow(permission)
            continue
        if permission.status in (P.ACTIVE, P.REVOKING):
            on_chain_now.setdefault(permission.chain_id, []).append(permission)
    return [
        _revoke_action(user=user, permissions=group, actor=actor) for group in on_chain_now.values()
    ]


def _revoke_action(*, user, permissions: list[SpendPermission], actor: Actor) -> Action:
    account: SmartAccount = permissions[0].account
    chain = get_chain(account.chain_id)
    calls = [chain_permission.revoke_data(permission_id=p.permission_id) for p in permissions]
    params = {
        "permission_ids": [p.permission_id for p in permissions],
        "names": [p.name for p in permissions],
    }
    with on_chain(chain):
        client = passkey_client(web3(chain.id), account)
        call = (
            client.execute(client.address, 0, calls[0])
            if len(calls) == 1
            else client.execute_batch([(client.address, 0, c) for c in calls])
        )
        op = _build(client, call, params, chain=chain)
    names = ", ".join(f"“{p.name}” ({agent_name(p.application)})" for p in permissions)
    with transaction.atomic():
        action = action_create(
            user=user,
            application=permissions[0].application,
            type=ActionType.SPEND_REVOKE,
            summary=f"Revoke the spending permission{'s' if len(permissions) > 1 else ''} {names}",
            chain_id=chain.id,
            smart_account=account.address,
            params=params,
            user_op=op,
            entry_point_version=account.entry_point_version,
            actor=actor,
        )
        for permission in permissions:
            if permission.status == P.ACTIVE:
                transition(
                    lifecycle=SPEND_PERMISSION_LIFECYCLE,
                    pk=permission.pk,
                    to=P.REVOKING,
                    actor=actor,
                    expected=P.ACTIVE,
                    updates={"revoke_action": action},
                    detail="revocation proposed: waiting for the user's passkey",
                )
            else:
                SpendPermission.objects.filter(pk=permission.pk).update(revoke_action=action)
        if len(permissions) == 1:
            Action.objects.filter(pk=action.pk).update(spend_permission=permissions[0])
    return action


def spend_permissions_agent_disconnected(*, user, application_id) -> list[Action]:
    """The user disconnected an agent: its keys destroyed, its grants revoked."""
    ids = SpendPermission.objects.filter(
        user=user, application_id=application_id, status__in=(*SPEND_PERMISSION_LIVE, P.REVOKING)
    ).values_list("pk", flat=True)
    return spend_permissions_revoke(
        user=user,
        permission_ids=list(ids),
        actor=Actor.end_user(user),
        why="the user disconnected the agent",
        withdrawn=AGENT_DISCONNECTED,
    )


def spend_permissions_user_deactivated(*, user, actor: Actor, why: str) -> list[Action]:
    """The user was deactivated: every key of theirs destroyed now, every grant withdrawn or
    its revocation proposed (signed with the passkey if they come back; the keys are gone
    whatever happens to it)."""
    ids = SpendPermission.objects.filter(
        user=user, status__in=(*SPEND_PERMISSION_LIVE, P.REVOKING)
    ).values_list("pk", flat=True)
    return spend_permissions_revoke(user=user, permission_ids=list(ids), actor=actor, why=why)


# --- spending under a permission -----------------------------------------------------------


@dataclass(frozen=True)
class Remaining:
    units: int | None  # None: the chain could not be read
    period_ends_at: datetime | None
    error: str = ""


def remaining(permission: SpendPermission) -> Remaining:
    """What is left of this period's allowance, read from the chain."""
    if permission.status != P.ACTIVE:
        return Remaining(0, None)
    chain = get_chain(permission.chain_id)
    try:
        with on_chain(chain):
            left = chain_permission.spendable(
                web3(chain.id), permission.account.address, permission.permission_id
            )
    except (ChainUnavailable, *CHAIN_RPC_ERRORS) as exc:  # shown as such, never guessed
        logger.warning("spendable of %s not readable: %r", permission.pk, exc)
        return Remaining(None, None, error=f"{chain.name} could not be read")
    ends = left.period_ends_at
    return Remaining(int(left.remaining), datetime.fromtimestamp(ends, tz=UTC) if ends else None)


def amount_text(units: int, token: Token) -> str:
    return f"{Decimal(decimal_string(units, token.decimals)):f} {token.symbol}"


def _this_period(period: str) -> str:
    return {"daily": "today's", "weekly": "this week's", "monthly": "this month's"}[period]


def _ended_reasons(*, user, application, token: Token) -> list[Reason]:
    """Why an agent whose permission for the token ended now needs the passkey (none if it
    never had one): it may not know the user revoked it or that it ran out."""
    ended = (
        SpendPermission.objects.filter(
            user=user, application=application, token=token, status__in=(P.REVOKED, P.EXPIRED)
        )
        .order_by("-starts_at")
        .first()
    )
    if ended is None:
        return []
    named = {"name": ended.name}
    if ended.status == P.REVOKED:
        return [Reason("revoked", f"the permission “{ended.name}” was revoked", named)]
    return [Reason("expired", f"the permission “{ended.name}” expired", named)]


def permission_for_transfer(
    *, user, application, token: Token, recipient: str, recipient_shown: str, units: int
) -> tuple[SpendPermission | None, list[Reason]]:
    """The agent's active permission that covers this transfer, or (None, why not) — no
    reason when the agent never held a permission for this token."""
    candidates = list(
        SpendPermission.objects.select_related("account", "token", "application").filter(
            user=user,
            application=application,
            token=token,
            status__in=(P.ACTIVE, P.REVOKING, P.GRANTING),
        )
    )
    if not candidates:
        return None, _ended_reasons(user=user, application=application, token=token)
    now = timezone.now()
    reasons = []
    for permission in candidates:
        listed = {r["address"].lower() for r in permission.recipients}
        why = _not_usable(permission, now) or (
            Reason(
                "recipient",
                f"{recipient_shown} is not in the permission's recipients",
                {"name": permission.name, "recipient": recipient_shown},
            )
            if not permission.any_recipient and recipient.lower() not in listed
            else _not_covered(permission, units)
        )
        if why is None:
            return permission, []
        reasons.append(why)
    return None, reasons


def _not_usable(permission: SpendPermission, now) -> Reason | None:
    """Why the permission cannot sign anything now (None if it can)."""
    named = {"name": permission.name}
    if permission.status != P.ACTIVE or not permission.has_key:
        if permission.status == P.REVOKING or not permission.has_key:
            return Reason("revoking", f"the permission “{permission.name}” is being revoked", named)
        return Reason(
            "not_granted", f"the permission “{permission.name}” is not granted on chain yet", named
        )
    if permission.expires_at <= now:
        return Reason("expired", "the permission expired", named)
    if permission.starts_at > now:
        starts = rfc3339(permission.starts_at)
        return Reason(
            "not_started", f"the permission starts at {starts}", {**named, "starts_at": starts}
        )
    return None


def _not_covered(permission: SpendPermission, units: int) -> Reason | None:
    """Why `units` of the permission's token do not fit its remaining allowance (None if they
    do), read on chain."""
    left = remaining(permission)
    if left.units is None:
        return Reason(
            "allowance_unreadable",
            f"the permission's remaining allowance could not be read: {left.error}",
            {"name": permission.name, "chain": chain_name(permission.chain_id)},
        )
    if units > left.units:
        token = permission.token
        return Reason(
            "over_allowance",
            f"over {_this_period(permission.period)} remaining {amount_text(left.units, token)}",
            {
                "name": permission.name,
                "period": permission.period,
                "amount": f"{Decimal(decimal_string(left.units, token.decimals)):f}",
                "symbol": token.symbol,
            },
        )
    return None


class NotCovered(Exception):
    """Why the permission's session key cannot sign this op; the caller falls back to the
    passkey and tells the agent this (`reason`)."""

    def __init__(self, reason: Reason):
        super().__init__(reason.text)
        self.reason = reason


def _session_signed_op(*, permission: SpendPermission, chain, build) -> tuple[dict, bytes]:
    """(the op `build(session, bundler, nonce_key)` makes, the session key). Raises
    NotCovered when the key is gone or the bundler's simulation refuses the op."""
    account = permission.account
    try:
        key = session_keys.unseal(permission.session_key_encrypted)
    except session_keys.SessionKeyUnavailable as exc:
        raise NotCovered(Reason("key_unavailable", str(exc), {"name": permission.name})) from exc
    with on_chain(chain):
        session = chain_permission.SessionKeyAccount(
            web3(chain.id),
            account.address,
            bytes.fromhex(permission.permission_id[2:]),
            key,
            version=account.entry_point_version,
        )
        bundler = bundler_client(chain.id, timeout=max(settings.BUNDLER_TIMEOUT_SECONDS, 10))
        try:
            # A lane of the permission's own nonce key per spend (the account takes a session
            # key's op only on that key): concurrent spends are all valid ops and the
            # contract, not the nonce, decides which fit the period's allowance. The
            # estimate simulates the spend: one the contract would refuse stops here.
            lane = chain_permission.nonce_key_for(permission.permission_id, secrets.randbits(32))
            return build(session, bundler, lane), key
        except BundlerError as exc:
            raise NotCovered(
                Reason(
                    "chain_refused",
                    f"the permission does not cover it on chain: {exc}",
                    {"name": permission.name},
                )
            ) from exc


def _signed_by_permission(
    *,
    permission: SpendPermission,
    user,
    application,
    type: str,
    summary: str,
    chain_id: int,
    params: dict,
    op: dict,
    key: bytes,
    ttl_seconds: int | None = None,
) -> Action:
    """The action of an op the session key signs: created, signed and queued for submission
    in one transaction, its history saying which permission signed it for which agent."""
    account = permission.account
    extra = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
    with transaction.atomic():
        # Read again under a row lock: a Revoke (or a deactivation) that destroyed the key
        # after this spend began has committed, or waits until this one has. Nothing is
        # signed with a key the server no longer holds.
        current = (
            SpendPermission.objects.select_for_update(of=("self",), no_key=True)
            .select_related("user")
            .get(pk=permission.pk)
        )
        if current.status != P.ACTIVE or not current.has_key or not current.user.is_active:
            raise NotCovered(
                Reason(
                    "revoking",
                    f"the permission “{permission.name}” is being revoked",
                    {"name": permission.name},
                )
            )
        action = action_create(
            user=user,
            application=application,
            type=type,
            summary=summary,
            chain_id=chain_id,
            smart_account=account.address,
            params={**params, "spend_permission": str(permission.pk)},
            user_op=op,
            entry_point_version=account.entry_point_version,
            **extra,
        )
        signature = chain_permission.sign_with_session_key(
            action.user_op_hash, key, permission_id=permission.permission_id
        )
        action = transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.SIGNED,
            actor=Actor.system(),
            only_from={ActionStatus.PROPOSED},
            updates={
                "user_op": {**action.user_op, "signature": signature},
                "spend_permission": permission,
            },
            detail=f"signed by permission {permission.name} for {agent_name(application)}",
        )
        enqueue_on_commit("actions.tasks.action_submit", action.pk)
    return action


def transfer_under_permission(
    *, permission: SpendPermission, user, application, request: TransferRequest
) -> Action:
    """Build the op that calls `executePermitted`, sign it with the session key and hand it
    to the submission. Raises NotCovered when the key is gone or the bundler's simulation
    refuses it: the caller then falls back to the passkey."""
    chain = get_chain(permission.chain_id)
    op, key = _session_signed_op(
        permission=permission,
        chain=chain,
        build=lambda session, bundler, lane: session.build_spend(
            bundler, to=request.recipient, amount=request.units, nonce_key=lane
        ),
    )
    return _signed_by_permission(
        permission=permission,
        user=user,
        application=application,
        type=ActionType.TRANSFER,
        summary=request.summary,
        chain_id=chain.id,
        params=request.params(),
        op=op,
        key=key,
    )


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
    return propose_transfer(
        user=user, application=application, request=request, permission_reasons=reasons
    )


def permission_for_swap(
    *, user, application, request: SwapRequest
) -> tuple[SpendPermission | None, list[Reason]]:
    """The agent's active permission whose pair is this swap's and whose remaining allowance
    covers it, or (None, why not) — no reason when the agent holds no pair from this token."""
    candidates = list(
        SpendPermission.objects.select_related(
            "account", "token", "to_token", "application"
        ).filter(
            user=user,
            application=application,
            token=request.token,
            to_token__isnull=False,
            status__in=(P.ACTIVE, P.REVOKING, P.GRANTING),
        )
    )
    if not candidates:
        return None, []
    if request.cross_chain:
        return None, [
            Reason(
                "cross_chain",
                "a swap to another chain is never covered by a permission: the bridge's output "
                "cannot be checked on the source chain",
            )
        ]
    now = timezone.now()
    reasons = []
    for permission in candidates:
        pair = {
            "name": permission.name,
            "symbol": permission.token.symbol,
            "to_symbol": permission.to_token.symbol,
        }
        why = (
            Reason(
                "wrong_pair",
                f"the permission “{permission.name}” names the pair {permission.token.symbol} → "
                f"{permission.to_token.symbol}, not this one",
                pair,
            )
            if permission.to_token.asset_id.lower() != request.to_asset_id.lower()
            else _not_usable(permission, now) or _not_covered(permission, request.units)
        )
        if why is None:
            return permission, []
        reasons.append(why)
    return None, reasons


def swap_under_permission(
    *, permission: SpendPermission, user, application, request: SwapRequest, quote
) -> Action:
    """Build the op that calls `executePermittedSwap` with the quote's router call, sign it
    with the session key and hand it to the submission. Raises NotCovered when the quote's
    route is not one of the permission's routers, the key is gone or the bundler's simulation
    refuses it: the caller then falls back to the passkey."""
    routers = {r.lower() for r in permission.routers}
    if quote.tx_to.lower() not in routers or quote.approval_address.lower() != quote.tx_to.lower():
        raise NotCovered(
            Reason(
                "route",
                f"the quote's route ({quote.tool}) is not one the permission allows",
                {"name": permission.name, "tool": quote.tool},
            )
        )
    if quote.tx_value:
        raise NotCovered(
            Reason(
                "route_value",
                "the quote's route pays a value, which a permission never covers",
                {"name": permission.name},
            )
        )
    op, key = _session_signed_op(
        permission=permission,
        chain=request.chain,
        build=lambda session, bundler, lane: session.build_swap(
            bundler,
            router=quote.tx_to,
            amount_in=request.units,
            data=quote.tx_data,
            min_out=max(quote.to_amount_min, 1),
            nonce_key=lane,
        ),
    )
    params, summary, quote_ttl = swap_params(request, quote)
    return _signed_by_permission(
        permission=permission,
        user=user,
        application=application,
        type=ActionType.SWAP,
        summary=summary,
        chain_id=request.chain.id,
        params=params,
        op=op,
        key=key,
        ttl_seconds=quote_ttl,
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
    return propose_swap_signed_by_user(
        user=user,
        application=application,
        request=request,
        quote=quote,
        permission_reasons=reasons,
    )


# --- reads -----------------------------------------------------------------------------------


def permission_payload(permission: SpendPermission, *, with_remaining: bool = True) -> dict:
    left = remaining(permission) if with_remaining and permission.status == P.ACTIVE else None
    spends = permission.actions.filter(type__in=(ActionType.TRANSFER, ActionType.SWAP)).order_by(
        "-created_at"
    )[:50]
    return {
        "permission_id": str(permission.pk),
        "name": permission.name,
        "purpose": permission.purpose,
        "status": permission.status,
        "chain_id": permission.chain_id,
        "asset_id": permission.token.asset_id,
        "symbol": permission.token.symbol,
        "allowance": permission.allowance,
        "period": permission.period,
        "recipients": [
            {"address": r["address"], "name": r.get("name") or None} for r in permission.recipients
        ],
        "any_recipient": permission.any_recipient,
        "to_asset_id": permission.to_token.asset_id if permission.to_token_id else None,
        "to_symbol": permission.to_token.symbol if permission.to_token_id else None,
        "starts_at": rfc3339(permission.starts_at),
        "expires_at": rfc3339(permission.expires_at),
        "remaining": decimal_string(left.units, permission.token.decimals)
        if left and left.units is not None
        else None,
        "period_ends_at": rfc3339(left.period_ends_at) if left and left.period_ends_at else None,
        "remaining_error": (left.error or None) if left else None,
        "spends": [
            {
                "action_id": str(a.pk),
                "type": a.type,
                "amount": a.params.get("amount", ""),
                # A swap's output comes back to the account: its token stands where a
                # transfer's recipient does.
                "to": a.params.get("to_asset_id", "")
                if a.type == ActionType.SWAP
                else a.params.get("to", ""),
                "status": a.status,
                "created_at": rfc3339(a.created_at),
            }
            for a in spends
        ],
    }


def spend_permissions_for_agent(*, user, application) -> list[dict]:
    """get_spend_permissions: the calling agent's own permissions only."""
    permissions = SpendPermission.objects.select_related(
        "token", "to_token", "account", "application"
    ).filter(user=user, application=application)
    return [permission_payload(spend_permission_follow(p)) for p in permissions[:50]]


def spend_permissions_for_user(*, user) -> list[SpendPermission]:
    return list(
        SpendPermission.objects.select_related("token", "to_token", "account", "application")
        .filter(user=user)
        .order_by("-created_at")[:100]
    )


def revoke_sign_path(action: Action) -> str:
    return reverse("sign", args=[action.pk])


def on_agent_disconnected(sender, *, user, application_id, **kwargs) -> str | None:
    """Receiver of core.agents.agent_disconnected: the agent's keys destroyed at once, its
    grants revoked on chain (the page to sign the revocation is where the user goes next)."""
    actions = spend_permissions_agent_disconnected(user=user, application_id=application_id)
    return revoke_sign_path(actions[0]) if actions else None


def on_agents_listed(sender, *, user, **kwargs) -> dict[int, list[dict]]:
    """Receiver of core.agents.agents_listed: each agent's active spending permissions, what
    it may move with no prompt (the Connected agents page says so next to the agent)."""
    found: dict[int, list[dict]] = {}
    active = (
        SpendPermission.objects.select_related("token", "to_token", "application")
        .filter(user=user, status=P.ACTIVE, expires_at__gt=timezone.now())
        .order_by("created_at")
    )
    for permission in active:
        found.setdefault(permission.application_id, []).append(
            {
                "id": str(permission.pk),
                "name": permission.name,
                "amount": permission.allowance,
                "symbol": permission.token.symbol,
                "period": permission.period,
                "to": "" if permission.any_recipient else recipients_text(permission.recipients),
                "swap_only": not permission.recipients and not permission.any_recipient,
                "to_symbol": permission.to_token.symbol if permission.to_token_id else "",
                "expires_at": permission.expires_at,
            }
        )
    return found


def on_user_deactivated(sender, *, user, actor: Actor, why: str, **kwargs) -> None:
    """Receiver of core.agents.user_deactivated."""
    spend_permissions_user_deactivated(user=user, actor=actor, why=why)
