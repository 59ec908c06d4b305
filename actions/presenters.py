"""The JSON shapes of the read tools (get_smart_accounts, get_card, get_profile,
get_transactions): rows in, payloads out. Queries are in the rooms' selectors.py; chain reads in
chain_reads.py."""

from __future__ import annotations

from actions.bridges.public import action_outcome, bridge_leg_of
from actions.card.public import card_state_last_executed, cards_for_user
from actions.execution.models import ActionType
from actions.history.models import HistoryKind
from actions.history.public import encode_cursor, history_page
from actions.ramps.models import RAMP_PROVIDER_FOR, KycStatus, RampCurrency
from actions.ramps.public import ramp_accounts_for_user
from core.formats import decimal_string, rfc3339


def smart_account_payload(account) -> dict:
    return {
        "address": account.address,
        "chainId": account.chain_id,
        "caip2": f"eip155:{account.chain_id}",
        "accountId": f"eip155:{account.chain_id}:{account.address}",
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


def card_summary(card) -> dict:
    """A card as get_card and get_profile list it, with the last state we confirmed (Gnosis
    Pay's own status needs a signed-in session)."""
    source = card.physical if card.is_virtual and card.physical else card
    last = card_state_last_executed(user_id=card.user_id, card_id=source.card_id)
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
    ramps = {r.currency: r for r in ramp_accounts_for_user(user=user)}
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
    cards = cards_for_user(user=user)
    return {
        "userId": str(user.pk),
        "email": user.email or None,
        "ramps": payload,
        "cards": [card_summary(c) for c in cards],
    }


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
        "formattedAmount": decimal_string(units, transfer.token.decimals),
        "units": str(units),
    }


def _minor(units, currency: dict) -> str:
    return decimal_string(int(units), int(currency.get("decimals") or 0))


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


def entry_payload(entry, transfers: list, ours: set[str]) -> dict:
    """One line: `transfers` are the TokenTransfers of its tx that touch `ours` (addresses)."""
    flows = [_flow(t, ours) for t in transfers]
    action, purchase = entry.action, entry.card_purchase
    receipts = []
    if entry.tx_hash:
        receipts.append(
            {
                "chainId": entry.chain_id,
                "caip2": f"eip155:{entry.chain_id}",
                "txHash": entry.tx_hash,
            }
        )
    if purchase:
        receipts += [
            {
                "chainId": purchase.card.chain_id,
                "caip2": f"eip155:{purchase.card.chain_id}",
                "txHash": h,
            }
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
        received_amount = received[0]["formattedAmount"] if received else None
        leg = getattr(action, "bridge_leg", None) if action else None
        if leg is not None:
            # Cross-chain: what arrived is the destination leg's (on the other chain), and only
            # when it is the asset asked for (a refund or another token is not "received").
            done = leg.status == "DONE" and leg.substatus == "COMPLETED"
            received_amount = leg.received_amount if done else None
            if leg.receiving_tx_hash:
                body["receipts"].append(
                    {
                        "chainId": leg.receiving_chain_id,
                        "caip2": f"eip155:{leg.receiving_chain_id}",
                        "txHash": leg.receiving_tx_hash.lower(),
                    }
                )
        body["swap"] = {
            "fromAssetId": params.get("from_asset_id"),
            "toAssetId": params.get("to_asset_id"),
            "fromAmount": params.get("amount"),
            "toAmountQuoted": params.get("to_amount"),
            "toAmountMin": params.get("to_amount_min"),
            "toAmountReceived": received_amount,
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
    """A page of the user's history, newest first (see `selectors.history_page`)."""
    page = history_page(user=user, cursor=cursor, limit=limit)
    items = [
        entry_payload(entry, page.transfers.get((entry.chain_id, entry.tx_hash), []), page.ours)
        for entry in page.entries
    ]
    return {
        "transactions": items,
        "nextCursor": encode_cursor(page.entries[-1]) if page.more else None,
    }


def signing_permission(action) -> tuple[str, str] | None:
    """(id, name) of the spending permission whose session key signed this transfer or swap,
    or None: the passkey signed it (a grant or a revocation is linked to its permission too,
    but the user signs those). The name is read with the action by the status query
    (`spend_permission_name`), else from the permission."""
    if action.spend_permission_id is None or action.type not in (
        ActionType.TRANSFER,
        ActionType.SWAP,
    ):
        return None
    name = action.__dict__.get("spend_permission_name")
    if name is None:
        name = action.spend_permission.name
    return str(action.spend_permission_id), name


def action_status_payload(action) -> dict:
    """get_action_status's body: `ActionStatusSerializer` (which documents it) written out by
    hand, key for key and byte for byte (a test compares them), because instantiating a DRF
    serializer costs more than the rest of the request."""
    signer = signing_permission(action)
    outcome, outcome_detail = action_outcome(action, bridge_leg_of(action))
    return {
        "action_id": str(action.id),
        "type": str(action.type),
        "status": str(action.status),
        "summary": str(action.summary),
        "chain_id": int(action.chain_id),
        "smart_account": str(action.smart_account),
        "tx_hash": action.tx_hash,
        "user_op_hash": action.user_op_hash,
        "block_number": None if action.block_number is None else int(action.block_number),
        "error": action.error,
        "created_at": rfc3339(action.created_at),
        "expires_at": rfc3339(action.expires_at),
        "signed_at": rfc3339(action.signed_at),
        "broadcast_at": rfc3339(action.broadcast_at),
        "executed_at": rfc3339(action.executed_at),
        "status_history": [
            {"status": row.status, "timestamp": rfc3339(row.timestamp), "detail": row.detail}
            for row in action.transitions
        ],
        "signed_by_permission": signer[1] if signer else None,
        "signed_by_permission_id": signer[0] if signer else None,
        "outcome": outcome,
        "outcome_detail": outcome_detail,
    }
