"""Chain reads of the read tools: network I/O, bounded by CHAIN_READ_TIMEOUT_SECONDS (an agent
is waiting). Token balances (get_balances) and the card's balance and allowance (get_card).
The database queries they need are in selectors.py, the JSON shapes in presenters.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal

import requests
from django.conf import settings
from web3 import Web3
from web3.exceptions import Web3Exception

from actions.presenters import card_summary, decimal_string
from actions.providers.prices import FIAT, PriceError, prices
from actions.selectors import card_get_for_user, smart_accounts_for_user, tokens_on_chains
from core.formats import rfc3339
from core.metrics import instrument_web3
from evm import zodiac
from evm.rpc import http_web3

# What a node that is down, slow or answering garbage raises through web3 and requests (the
# relayer catches the same): refused or timed-out connections, HTTP errors, JSON-RPC errors,
# undecodable answers. Anything else is a bug and propagates.
CHAIN_RPC_ERRORS = (requests.RequestException, Web3Exception, OSError, ValueError)


class ChainAnswerError(ValueError):
    """The node answered, but not what was asked: a field missing or of the wrong type."""


@contextmanager
def node_answer(what: str) -> Iterator[None]:
    """Around code that only picks a node's answer apart: a missing key or a wrong type there
    is the node's fault, raised as ChainAnswerError (one of CHAIN_RPC_ERRORS). Keep anything
    else (database writes, our own calls) outside, so its bugs still propagate."""
    try:
        yield
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ChainAnswerError(f"unusable answer to {what}: {exc!r}") from exc


def chain_reader():
    """web3 for the read tools, bounded by CHAIN_READ_TIMEOUT_SECONDS (an agent is waiting)."""
    timeout = settings.CHAIN_READ_TIMEOUT_SECONDS
    w3 = http_web3(settings.CHAIN_RPC_URL, timeout=timeout, retries=True)
    return instrument_web3(w3, provider="chain_rpc")


def _balance_of(w3, token_address: str, owner: str):
    """An `eth_call` of ERC-20 `balanceOf(owner)`, to add to a JSON-RPC batch."""

    data = Web3.keccak(text="balanceOf(address)")[:4] + bytes(12) + bytes.fromhex(owner[2:])
    return w3.eth.call({"to": Web3.to_checksum_address(token_address), "data": data})


def balances_for_user(*, user, w3=None) -> dict:
    """Token balances of the user's accounts, read from the chain in one JSON-RPC batch per
    chain, with fiat values when the price source answers (none at all when it does not)."""

    accounts = smart_accounts_for_user(user=user)
    tokens = tokens_on_chains(chain_ids={a.chain_id for a in accounts})
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
        amount = decimal_string(units, token.decimals)
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

    card = card_get_for_user(user=user, card_id=card_id)
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
                "amount": decimal_string(units, token.decimals),
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
            "dailyLimit": decimal_string(refill, decimals),
            "remaining": decimal_string(balance, decimals),
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
