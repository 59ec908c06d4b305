"""Spending under a permission: whether the agent's active permission covers a transfer or a
swap (and why not), and the user operation signed by the permission's session key, with no
passkey prompt. The proposals room (proposals/services.py) asks here first."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from actions.accounts.models import Token
from actions.chain_reads import CHAIN_RPC_ERRORS
from actions.evm_clients import ChainUnavailable, bundler_client, on_chain, tool_web3
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionType
from actions.execution.public import action_create
from actions.permissions import session_keys
from actions.permissions.follow import P
from actions.permissions.grants import agent_name
from actions.permissions.models import SpendPermission
from actions.permissions.reasons import Reason
from actions.tool_requests.public import SwapRequest, TransferRequest, swap_params
from core.chains import chain_name, get_chain
from core.formats import decimal_string, rfc3339
from core.lifecycle import Actor, enqueue_on_commit, transition
from evm import spend_permission as chain_permission
from evm.bundler import BundlerError

logger = logging.getLogger(__name__)


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
                tool_web3(chain.id), permission.account.address, permission.permission_id
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
            tool_web3(chain.id),
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
        enqueue_on_commit("actions.tasks.action_submit_task", action.pk)
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
