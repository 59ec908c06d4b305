from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from actions.models import IN_FLIGHT, PENDING_ON_CHAIN, Action, ActionStatus
from picnic.formats import rfc3339


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


def actions_pending_on_chain(*, limit: int, now: datetime | None = None) -> QuerySet[Action]:
    """What reconciliation follows: submitted/broadcast actions (user operations, card actions
    awaiting Gnosis Pay or the delay module) and signed ones whose submission never started,
    least recently reconciled first, so batches rotate."""
    grace = (now or timezone.now()) - timedelta(seconds=settings.ACTIONS_SUBMIT_GRACE_SECONDS)
    return Action.objects.filter(
        Q(status__in=PENDING_ON_CHAIN) | Q(status=ActionStatus.SIGNED, signed_at__lt=grace)
    ).order_by(F("last_reconciled_at").asc(nulls_first=True), "created_at")[:limit]


def actions_stuck(*, minutes: int | None = None, now: datetime | None = None) -> QuerySet[Action]:
    """Signed more than ACTIONS_STUCK_AFTER_MINUTES ago and still not ended: staff look.

    Measured from the signature, not from the last change, so an action whose error keeps
    changing (re-sends) still counts as stuck."""
    minutes = minutes or settings.ACTIONS_STUCK_AFTER_MINUTES
    cutoff = (now or timezone.now()) - timedelta(minutes=minutes)
    return Action.objects.filter(status__in=IN_FLIGHT, signed_at__lt=cutoff)


# --- Read tools -------------------------------------------------------------------------------


def chain_reader():
    """web3 for the read tools, bounded by CHAIN_READ_TIMEOUT_SECONDS (an agent is waiting)."""
    from web3 import Web3

    return Web3(
        Web3.HTTPProvider(
            settings.CHAIN_RPC_URL, request_kwargs={"timeout": settings.CHAIN_READ_TIMEOUT_SECONDS}
        )
    )


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


def _balance_of(w3, token_address: str, owner: str):
    """An `eth_call` of ERC-20 `balanceOf(owner)`, to add to a JSON-RPC batch."""
    from web3 import Web3

    data = Web3.keccak(text="balanceOf(address)")[:4] + bytes(12) + bytes.fromhex(owner[2:])
    return w3.eth.call({"to": Web3.to_checksum_address(token_address), "data": data})


def _decimal_string(units: int, decimals: int) -> str:
    from decimal import Decimal

    value = Decimal(units).scaleb(-decimals)
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def balances_for_user(*, user, w3=None) -> dict:
    """Token balances of the user's accounts, read from the chain in one JSON-RPC batch per
    chain, with fiat values when the price source answers (none at all when it does not)."""
    from decimal import Decimal

    from web3 import Web3

    from actions.models import Token
    from actions.providers.prices import FIAT, PriceError, prices

    accounts = smart_accounts_for_user(user=user)
    tokens = list(
        Token.objects.filter(chain_id__in={a.chain_id for a in accounts})
        .select_related("vault_asset")
        .order_by("symbol")
    )
    pairs = [(a, t) for a in accounts for t in tokens if t.chain_id == a.chain_id]
    w3 = w3 or chain_reader()
    to_assets = Web3.keccak(text="convertToAssets(uint256)")[:4]
    vaults = [t for t in tokens if t.vault_asset_id and any(p[1] is t for p in pairs)]
    raw: list[int] = []
    per_share: dict[int, int] = {}
    if pairs:
        # One HTTP round trip for every balanceOf, and each vault's share price (JSON-RPC batch).
        with w3.batch_requests() as batch:
            for account, token in pairs:
                batch.add(_balance_of(w3, token.address, account.address))
            for vault in vaults:
                data = to_assets + (10**vault.decimals).to_bytes(32, "big")
                batch.add(
                    w3.eth.call({"to": Web3.to_checksum_address(vault.address), "data": data})
                )
            results = batch.execute()
        words = [int.from_bytes(bytes(r), "big") if len(bytes(r)) == 32 else 0 for r in results]
        raw, per_share = (
            words[: len(pairs)],
            dict(zip((v.pk for v in vaults), words[len(pairs) :], strict=True)),
        )
    fiat_error = None
    price_table: dict = {}
    try:
        price_table = prices(
            [(t.vault_asset or t).price_id for t in tokens if (t.vault_asset or t).price_id]
        )
    except PriceError as exc:
        fiat_error = str(exc)
    balances = []
    for (account, token), units in zip(pairs, raw, strict=True):
        amount = _decimal_string(units, token.decimals)
        priced = token.vault_asset or token
        price = price_table.get(priced.price_id)
        fiat = None
        if price is not None:
            value = Decimal(units).scaleb(-token.decimals)
            if token.vault_asset:  # shares → the assets they redeem for, at the asset's price
                value = (
                    Decimal(units * per_share[token.pk])
                    .scaleb(-token.decimals)
                    .scaleb(-priced.decimals)
                )
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
    unpriced = [t.symbol for t in tokens if not (t.vault_asset or t).price_id]
    if fiat_error is None and unpriced:
        fiat_error = "no price source id for: " + ", ".join(unpriced)
    return {"balances": balances, "fiatAvailable": fiat_error is None, "fiatError": fiat_error}


def card_for_user(*, user, card_id: str | None = None, w3=None) -> dict:
    """get_card: the card's state, the balance of its account (a virtual card shows its
    physical sibling's), and its daily allowance read from the Safe's Roles modifier (and the
    Delay queue), all in one JSON-RPC batch."""
    from datetime import UTC, datetime

    from web3 import Web3

    from actions.models import Card
    from chain import zodiac

    cards = Card.objects.select_related("token", "physical", "physical__token").filter(user=user)
    card = (
        cards.filter(card_id=card_id).first() if card_id else cards.filter(is_virtual=False).first()
    )
    if card is None:
        raise ActionNotFound(
            f"Card not found: {card_id}" if card_id else "No Picnic card for this user"
        )
    source = card.physical if card.is_virtual and card.physical else card  # virtual: inherits
    w3 = w3 or chain_reader()
    roles = w3.eth.contract(
        address=Web3.to_checksum_address(source.roles_address or "0x" + "00" * 20),
        abi=zodiac.abi("RolesV2"),
    )
    delay = w3.eth.contract(
        address=Web3.to_checksum_address(source.delay_address or "0x" + "00" * 20),
        abi=zodiac.abi("Delay"),
    )
    token = source.token
    calls = ["block"]
    with w3.batch_requests() as batch:
        batch.add(w3.eth.get_block("latest"))
        if token:
            batch.add(_balance_of(w3, token.address, source.safe_address))
            calls.append("balance")
        if source.roles_address and source.delay_address:
            batch.add(roles.functions.allowances(zodiac.SPENDING_ALLOWANCE_KEY))
            batch.add(delay.functions.txNonce())
            batch.add(delay.functions.queueNonce())
            batch.add(delay.functions.txCooldown())
            calls += ["allowance", "txNonce", "queueNonce", "cooldown"]
        results = dict(zip(calls, batch.execute(), strict=True))
    now = results["block"]["timestamp"]
    balances = []
    if token:
        units = int.from_bytes(bytes(results["balance"]), "big")
        balances.append(
            {
                "currency": token.symbol,
                "assetId": token.asset_id,
                "amount": _decimal_string(units, token.decimals),
                "units": str(units),
            }
        )
    allowance = None
    if "allowance" in results:
        refill, max_refill, period, balance, timestamp = results["allowance"]
        if period and now >= timestamp + period:  # Roles v2 accrues lazily: what it would be now
            periods = (now - timestamp) // period
            balance = min(max_refill, balance + refill * periods) if refill else balance
            timestamp += periods * period
        decimals = token.decimals if token else 0
        allowance = {
            "currency": token.symbol if token else None,
            "assetId": token.asset_id if token else None,
            "dailyLimit": _decimal_string(refill, decimals),
            "remaining": _decimal_string(balance, decimals),
            "period": {
                "seconds": period,
                "resetsAt": (
                    rfc3339(datetime.fromtimestamp(timestamp + period, UTC)) if period else None
                ),
            },
            "queuedChanges": results["queueNonce"] - results["txNonce"],
            "cooldownSeconds": results["cooldown"],
        }
    return {**card_summary(card), "balances": balances, "allowance": allowance}


def card_summary(card) -> dict:
    """A card as get_card and get_profile list it, with the last state we confirmed (Gnosis
    Pay's own status needs a signed-in session)."""
    from actions.models import ActionStatus, ActionType

    source = card.physical if card.is_virtual and card.physical else card
    last = (
        Action.objects.filter(
            user_id=card.user_id,
            type__in=(ActionType.CARD_FREEZE, ActionType.CARD_UNFREEZE),
            status=ActionStatus.EXECUTED,
            params__card_id=source.card_id,
        )
        .order_by("-executed_at")
        .first()
    )
    return {
        "cardId": card.card_id,
        "last4": card.last4,
        "virtual": card.is_virtual,
        "physicalCardId": source.card_id if source is not card else None,
        "safeAddress": source.safe_address,
        "chainId": source.chain_id,
        "state": ("frozen" if last.type == ActionType.CARD_FREEZE else "active")
        if last
        else "unknown",
        "stateConfirmedAt": rfc3339(last.executed_at) if last else None,
    }


def profile_for_user(*, user) -> dict:
    """get_profile: who the user is, their fiat ramps keyed by currency (each currency has one
    provider; no account there means KYC `none`), and their cards."""
    from actions.models import RAMP_PROVIDER_FOR, Card, KycStatus, RampAccount, RampCurrency

    ramps = {r.currency: r for r in RampAccount.objects.filter(user=user)}
    payload = {}
    for currency in RampCurrency:
        provider = RAMP_PROVIDER_FOR[currency]
        ramp = ramps.get(currency)
        payload[currency.value] = {
            "provider": provider.value,
            "providerName": provider.label,
            "accountId": ramp.external_id if ramp else None,
            "kyc": {
                "status": ramp.kyc_status if ramp else KycStatus.NONE.value,
                "providerStatus": (ramp.provider_status or None) if ramp else None,
                "checkedAt": rfc3339(ramp.kyc_checked_at) if ramp else None,
                # The provider could not be asked just now: the status is the last one known.
                "error": (ramp.kyc_error or None) if ramp else None,
            },
        }
    cards = Card.objects.select_related("physical").filter(user=user).order_by("created_at", "pk")
    return {
        "userId": str(user.pk),
        "email": user.email or None,
        "ramps": payload,
        "cards": [card_summary(c) for c in cards],
    }


# --- get_transactions ------------------------------------------------------------------------


class InvalidCursor(Exception):
    pass


def _encode_cursor(entry) -> str:
    import base64
    import json

    raw = json.dumps({"t": entry.occurred_at.isoformat(), "id": entry.pk}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, int]:
    import base64
    import binascii
    import json

    from django.utils.dateparse import parse_datetime

    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        when, pk = parse_datetime(data["t"]), int(data["id"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise InvalidCursor(f"Invalid cursor: {cursor[:40]}") from None
    if when is None or when.tzinfo is None:
        raise InvalidCursor(f"Invalid cursor: {cursor[:40]}")
    return when, pk


def _flow(transfer, ours: set[str]) -> dict:
    source, target = transfer.from_address, transfer.to_address
    if source in ours and target in ours:
        direction, account, counterparty = "self", source, target
    elif source in ours:
        direction, account, counterparty = "out", source, target
    else:
        direction, account, counterparty = "in", target, source
    units = int(transfer.units)
    return {
        "direction": direction,
        "account": account,
        "counterparty": counterparty,
        "assetId": transfer.token.asset_id,
        "symbol": transfer.token.symbol,
        "formattedAmount": _decimal_string(units, transfer.token.decimals),
        "units": str(units),
    }


def _minor(units, currency: dict) -> str:
    return _decimal_string(int(units), int(currency.get("decimals") or 0))


def _purchase_block(purchase) -> dict:
    def currency(c: dict) -> dict:
        return {"code": c.get("code"), "symbol": c.get("symbol"), "name": c.get("name")}

    merchant = purchase.merchant or {}
    country = merchant.get("country")
    return {
        "cardId": purchase.card.card_id,
        "last4": purchase.card.last4,
        "kind": purchase.kind,
        "status": purchase.status,
        "isPending": purchase.is_pending,
        "clearedAt": rfc3339(purchase.cleared_at),
        "merchant": {
            "name": merchant.get("name"),
            "city": merchant.get("city"),
            "country": country.get("alpha2") if isinstance(country, dict) else country,
        },
        "mcc": purchase.mcc,
        "billingAmount": _minor(purchase.billing_amount, purchase.billing_currency),
        "billingCurrency": currency(purchase.billing_currency),
        "transactionAmount": _minor(purchase.transaction_amount, purchase.transaction_currency),
        "transactionCurrency": currency(purchase.transaction_currency),
        "transactionType": purchase.transaction_type or None,
    }


def _purchase_flows(purchase) -> list[dict]:
    """Before (or without) its settlement on chain, a purchase's flow is its billing amount in
    the card's token (EURe for a EUR card: 1:1)."""
    token = purchase.card.token or (
        purchase.card.physical.token if purchase.card.physical else None
    )
    return [
        {
            "direction": "in" if purchase.kind in ("Refund", "Reversal") else "out",
            "account": purchase.card.safe_address.lower() or None,
            "counterparty": None,
            "assetId": token.asset_id if token else None,
            "symbol": token.symbol if token else purchase.billing_currency.get("name"),
            "formattedAmount": _minor(purchase.billing_amount, purchase.billing_currency),
            "units": None,
        }
    ]


def _entry_payload(entry, transfers: list, ours: set[str]) -> dict:
    """One line: `transfers` are the TokenTransfers of its tx that touch `ours` (addresses)."""
    from actions.models import RAMP_PROVIDER_FOR, HistoryKind

    flows = [_flow(t, ours) for t in transfers]
    action, purchase = entry.action, entry.card_purchase
    receipts = []
    if entry.tx_hash:
        receipts.append({"chainId": entry.chain_id, "txHash": entry.tx_hash})
    if purchase:
        receipts += [
            {"chainId": purchase.card.chain_id, "txHash": h}
            for h in purchase.tx_hashes
            if h != entry.tx_hash
        ]
    body = {
        "id": f"tx_{entry.pk}",
        "type": entry.kind,
        "timestamp": rfc3339(entry.occurred_at),
        "status": "pending" if purchase and purchase.is_pending else "confirmed",
        "actionId": str(action.pk) if action else None,
        "flows": flows or (_purchase_flows(purchase) if purchase else []),
        "receipts": receipts,
    }
    params = action.params if action else {}
    if entry.kind == HistoryKind.SWAP:
        received = [f for f in flows if f["direction"] == "in"]
        body["swap"] = {
            "fromAssetId": params.get("from_asset_id"),
            "toAssetId": params.get("to_asset_id"),
            "fromAmount": params.get("amount"),
            "toAmountQuoted": params.get("to_amount"),
            "toAmountMin": params.get("to_amount_min"),
            "toAmountReceived": received[0]["formattedAmount"] if received else None,
            "provider": params.get("provider"),
            "slippagePercent": params.get("slippage"),
            "crossChain": bool(params.get("cross_chain")),
        }
    elif entry.kind == HistoryKind.RAMP:
        flow = next((f for f in flows if f["counterparty"] == "0x" + "00" * 20), flows[0])
        currency = {p: c for c, p in RAMP_PROVIDER_FOR.items()}
        provider = next((t.token.ramp_provider for t in transfers if t.token.ramp_provider), "")
        body["ramp"] = {
            "provider": provider,
            "direction": "onramp" if flow["direction"] == "in" else "offramp",
            "fiatCurrency": currency[provider].value if provider in currency else None,
            "amount": flow["formattedAmount"],
            "assetId": flow["assetId"],
        }
    elif entry.kind == HistoryKind.INVESTMENT:
        share = next(t for t in transfers if t.token.vault_asset_id)
        shares = next(f for f in flows if f["assetId"] == share.token.asset_id)
        underlying = next(
            (f for f in flows if f["assetId"] == share.token.vault_asset.asset_id), None
        )
        body["investment"] = {
            "direction": "deposit" if shares["direction"] == "in" else "withdraw",
            "vault": share.token.address,
            "vaultAssetId": share.token.asset_id,
            "shares": shares["formattedAmount"],
            "assetId": share.token.vault_asset.asset_id,
            "assets": underlying["formattedAmount"] if underlying else None,
        }
    elif entry.kind == HistoryKind.CARD_PURCHASE and purchase:
        body["cardPurchase"] = _purchase_block(purchase)
    elif entry.kind in (HistoryKind.CARD_FREEZE, HistoryKind.CARD_UNFREEZE, HistoryKind.CARD_LIMIT):
        body["card"] = {
            "cardId": params.get("card_id"),
            "last4": params.get("last4"),
            **(
                {"dailyLimit": params.get("daily_limit"), "assetId": params.get("asset_id")}
                if entry.kind == HistoryKind.CARD_LIMIT
                else {}
            ),
        }
    return body


def transactions_page(*, user, cursor: str | None = None, limit: int = 20) -> dict:
    """A page of the user's history, newest first, keyset-paginated on (occurred_at, id): the
    cursor names the last entry shown, so entries added later (always newer, or merged into an
    existing line) never shift or repeat what the next page holds."""
    from django.db.models import Q

    from actions.models import HistoryEntry, SmartAccount, TokenTransfer

    entries = HistoryEntry.objects.filter(user=user).select_related(
        "action",
        "card_purchase",
        "card_purchase__card",
        "card_purchase__card__token",
        "card_purchase__card__physical__token",
    )
    if cursor:
        when, pk = _decode_cursor(cursor)
        entries = entries.filter(Q(occurred_at__lt=when) | Q(occurred_at=when, pk__lt=pk))
    page = list(entries.order_by("-occurred_at", "-pk")[: limit + 1])
    more, page = len(page) > limit, page[:limit]
    ours = {
        a.lower() for a in SmartAccount.objects.filter(user=user).values_list("address", flat=True)
    }
    transfers: dict[tuple[int, str], list] = {}
    keys = {(e.chain_id, e.tx_hash) for e in page if e.tx_hash}
    if keys:
        found = TokenTransfer.objects.filter(tx_hash__in={h for _, h in keys}).select_related(
            "token", "token__vault_asset"
        )
        for t in found.order_by("log_index"):
            if t.from_address in ours or t.to_address in ours:
                transfers.setdefault((t.chain_id, t.tx_hash), []).append(t)
    items = [
        _entry_payload(entry, transfers.get((entry.chain_id, entry.tx_hash), []), ours)
        for entry in page
    ]
    return {"transactions": items, "nextCursor": _encode_cursor(page[-1]) if more else None}


def gnosis_pay_session_token(*, safe_address: str) -> str | None:
    """The unexpired Gnosis Pay JWT of the Safe's last passkey sign-in, if any."""
    from django.utils import timezone

    from actions.models import GnosisPaySession

    session = GnosisPaySession.objects.filter(
        safe_address=safe_address.lower(), expires_at__gt=timezone.now()
    ).first()
    return session.token if session else None
