from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, QuerySet
from django.utils import timezone

from actions.models import PENDING_ON_CHAIN, Action


class ActionNotFound(Exception):
    pass


class ActionAccessDenied(Exception):
    pass


def retention_cutoff(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(hours=settings.ACTION_RETENTION_HOURS)


def action_get_for_client(
    *, action_id: str, user, application, now: datetime | None = None
) -> Action:
    """The action as its creator (user + OAuth client) may see it, with the seed's errors."""
    try:
        pk = uuid.UUID(str(action_id))
    except ValueError:
        raise ActionNotFound(f"Action not found: {action_id}") from None
    action = (
        Action.objects.filter(pk=pk, created_at__gte=retention_cutoff(now))
        .select_related("user", "application")
        .first()
    )
    if action is None:
        raise ActionNotFound(f"Action not found: {action_id}")
    if action.user_id != user.pk:
        raise ActionAccessDenied("Action does not belong to the authenticated user")
    if application is None or action.application_id != application.pk:
        raise ActionAccessDenied("Action belongs to a different OAuth client")
    return action


def action_with_history(*, action_id) -> Action:
    return Action.objects.prefetch_related("history").get(pk=action_id)


def actions_pending_on_chain(*, limit: int) -> QuerySet[Action]:
    """Submitted/broadcast actions (user operations, and card actions awaiting Gnosis Pay),
    least recently reconciled first, so batches rotate."""
    return Action.objects.filter(status__in=PENDING_ON_CHAIN).order_by(
        F("last_reconciled_at").asc(nulls_first=True), "created_at"
    )[:limit]


def actions_stuck(*, minutes: int | None = None, now: datetime | None = None) -> QuerySet[Action]:
    minutes = minutes or settings.ACTIONS_STUCK_AFTER_MINUTES
    cutoff = (now or timezone.now()) - timedelta(minutes=minutes)
    return Action.objects.filter(status__in=PENDING_ON_CHAIN, updated_at__lt=cutoff)


# --- Read tools -------------------------------------------------------------------------------


def smart_accounts_for_user(*, user) -> list:
    """The accounts the user's passkey controls: Picnic (ERC-4337) accounts it signs for, and
    Gnosis Pay Safes those accounts own."""
    from actions.models import SmartAccount, SmartAccountKind

    picnic = list(
        SmartAccount.objects.filter(
            user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False
        ).order_by("created_at", "pk")
    )
    owners = [f"account:{a.address}" for a in picnic]
    safes = list(
        SmartAccount.objects.filter(
            user=user, kind=SmartAccountKind.GNOSIS_PAY, owner__in=owners
        ).order_by("created_at", "pk")
    )
    return picnic + safes


def smart_account_payload(account) -> dict:
    return {
        "address": account.address,
        "chainId": account.chain_id,
        "accountType": account.kind,
        **(
            {"entryPointVersion": account.entry_point_version}
            if account.entry_point_version
            else {}
        ),
        **(
            {"owner": account.owner.removeprefix("account:")}
            if account.owner.startswith("account:")
            else {}
        ),
    }


def _decimal_string(units: int, decimals: int) -> str:
    from decimal import Decimal

    value = Decimal(units).scaleb(-decimals)
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def balances_for_user(*, user, w3=None) -> dict:
    """Token balances of the user's accounts, read from the chain in one JSON-RPC batch per
    chain, with fiat values when the price source answers (none at all when it does not)."""
    from decimal import Decimal

    from django.conf import settings
    from web3 import Web3

    from actions.models import Token
    from actions.providers.prices import FIAT, PriceError, prices

    accounts = smart_accounts_for_user(user=user)
    tokens = list(
        Token.objects.filter(chain_id__in={a.chain_id for a in accounts}).order_by("symbol")
    )
    pairs = [(a, t) for a in accounts for t in tokens if t.chain_id == a.chain_id]
    w3 = w3 or Web3(
        Web3.HTTPProvider(
            settings.CHAIN_RPC_URL, request_kwargs={"timeout": settings.BUNDLER_TIMEOUT_SECONDS * 5}
        )
    )
    selector = Web3.keccak(text="balanceOf(address)")[:4]
    raw: list[int] = []
    if pairs:
        # One HTTP round trip for every balanceOf (JSON-RPC batch).
        with w3.batch_requests() as batch:
            for account, token in pairs:
                data = selector + bytes(12) + bytes.fromhex(account.address[2:])
                batch.add(
                    w3.eth.call({"to": Web3.to_checksum_address(token.address), "data": data})
                )
            results = batch.execute()
        raw = [int.from_bytes(bytes(r), "big") if len(bytes(r)) == 32 else 0 for r in results]
    fiat_error = None
    price_table: dict = {}
    try:
        price_table = prices([t.price_id for t in tokens if t.price_id])
    except PriceError as exc:
        fiat_error = str(exc)
    balances = []
    for (account, token), units in zip(pairs, raw, strict=True):
        amount = _decimal_string(units, token.decimals)
        price = price_table.get(token.price_id)
        fiat = None
        if price is not None:
            value = Decimal(units).scaleb(-token.decimals)
            fiat = {c: str((value * price[c]).quantize(Decimal("0.01"))) for c in FIAT}
        balances.append(
            {
                "account": account.address,
                "accountType": account.kind,
                "chainId": token.chain_id,
                "assetId": token.asset_id,
                "contractAddress": token.address,
                "symbol": token.symbol,
                "decimals": token.decimals,
                "amount": amount,
                "units": str(units),
                "fiat": fiat,
            }
        )
    if fiat_error is None and any(t.price_id == "" for t in tokens):
        fiat_error = "no price source id for: " + ", ".join(
            t.symbol for t in tokens if not t.price_id
        )
    return {"balances": balances, "fiatAvailable": fiat_error is None, "fiatError": fiat_error}
