"""The chain reads of the read tools get_balances and get_card: token balances on every chain
of the table (one JSON-RPC batch per chain, the chains at once, the prices beside them) and the
card's balance and allowance on the card's chain. The queries they need are in the rooms'
selectors (through their public faces), the JSON shapes in presenters.py, the reading itself
in chain_reads.py."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from web3 import Web3

from actions.accounts.public import smart_accounts_for_user, tokens_on_chains
from actions.card.public import card_get_for_user
from actions.chain_reads import (
    BALANCE_OF,
    CONVERT_TO_ASSETS,
    ChainAnswerError,
    ChainOutcome,
    ChainsUnavailable,
    chain_reader,
    read_batches,
)
from actions.evm_clients import on_chain
from actions.presenters import card_summary
from actions.providers.prices import FIAT, PriceError, prices
from core.chains import all_chains, get_chain
from core.formats import decimal_string, rfc3339
from evm import zodiac
from evm.word_reader import read_words, words


def _balance_of(w3, token_address: str, owner: str):
    """An `eth_call` of ERC-20 `balanceOf(owner)`, to add to a JSON-RPC batch."""

    data = Web3.keccak(text="balanceOf(address)")[:4] + bytes(12) + bytes.fromhex(owner[2:])
    return w3.eth.call({"to": Web3.to_checksum_address(token_address), "data": data})


def _balance_calls(pairs: list, vaults: list) -> list[tuple[str, list]]:
    """One chain's balances: every balanceOf and each vault's share price, made by one
    `eth_call` (`evm.word_reader`: a node answers ten calls in one for about half the CPU of
    ten in a batch), for one JSON-RPC batch (one HTTP round trip)."""
    return read_words(
        [
            (token.address, BALANCE_OF + "00" * 12 + account.address[2:].lower())
            for account, token in pairs
        ]
        + [(vault.address, CONVERT_TO_ASSETS + f"{10**vault.decimals:064x}") for vault in vaults]
    )


def _balance_words(results: list, pairs: list, vaults: list) -> tuple[list[int], dict[int, int]]:
    try:
        found = words(results, len(pairs) + len(vaults))
    except ValueError as exc:
        raise ChainAnswerError(f"unusable answer to the balances read: {exc}") from exc
    return found[: len(pairs)], dict(zip((v.pk for v in vaults), found[len(pairs) :], strict=True))


def balances_for_user(*, user) -> dict:
    """Token balances of the user's accounts on every configured chain: one JSON-RPC batch per
    chain, the chains in parallel (and the prices beside them), with fiat values when the price
    source answers (none at all when it does not). A chain that fails is listed in `chains`
    with its error, the others' balances are still served; if every chain failed there is
    nothing true to show: ChainsUnavailable (503)."""

    accounts = smart_accounts_for_user(user=user)
    served = all_chains()
    tokens = tokens_on_chains(chain_ids={c.id for c in served})
    plans: dict[int, tuple[list, list]] = {}
    for chain in served:
        pairs = [
            (a, t)
            for a in accounts
            for t in tokens
            if a.chain_id == chain.id and t.chain_id == chain.id
        ]
        vaults = [t for t in tokens if t.vault_asset_id and any(p[1] is t for p in pairs)]
        plans[chain.id] = (pairs, vaults)
    # Only the chains with something to read are asked (a chain with no token or account has
    # nothing to report, and is listed without error).
    asked = [c for c in served if plans[c.id][0]]
    fiat_error = None

    def priced() -> dict:
        nonlocal fiat_error
        try:
            return prices(
                [(t.vault_asset or t).price_id for t in tokens if (t.vault_asset or t).price_id]
            )
        except PriceError as exc:
            fiat_error = str(exc)
            return {}

    outcomes, price_table = read_batches(
        {chain: _balance_calls(*plans[chain.id]) for chain in asked},
        parse=lambda chain, results: _balance_words(results, *plans[chain.id]),
        alongside=priced,
    )
    failed = [o for o in outcomes if o.error]
    if outcomes and len(failed) == len(outcomes):
        raise ChainsUnavailable(failed)
    by_chain = {o.chain.id: o for o in outcomes}
    balances = []
    for chain in served:
        outcome = by_chain.get(chain.id)
        if outcome is None or outcome.error:
            continue
        raw, per_share = outcome.value
        for (account, token), units in zip(plans[chain.id][0], raw, strict=True):
            amount = decimal_string(units, token.decimals)
            priced_token = token.vault_asset or token
            price = price_table.get(priced_token.price_id)
            fiat = None
            if price is not None:
                value = Decimal(units).scaleb(-token.decimals)
                if token.vault_asset:  # shares → the assets they redeem for, at the asset's price
                    value = (
                        Decimal(units * per_share[token.pk])
                        .scaleb(-token.decimals)
                        .scaleb(-priced_token.decimals)
                    )
                fiat = {c: str((value * price[c]).quantize(Decimal("0.01"))) for c in FIAT}
            balances.append(
                {
                    "account": account.address,
                    "accountType": account.kind,
                    "chainId": token.chain_id,
                    "caip2": chain.caip2,
                    "assetId": token.asset_id,
                    "contractAddress": token.address,
                    "symbol": token.symbol,
                    "decimals": token.decimals,
                    "amount": amount,
                    "units": str(units),
                    "fiat": fiat,
                }
            )
    unpriced = sorted({t.symbol for t in tokens if not (t.vault_asset or t).price_id})
    if fiat_error is None and unpriced:
        fiat_error = "no price source id for: " + ", ".join(unpriced)
    return {
        "balances": balances,
        "fiatAvailable": fiat_error is None,
        "fiatError": fiat_error,
        "chains": [
            (by_chain[c.id] if c.id in by_chain else ChainOutcome(c)).entry() for c in served
        ],
    }


def card_for_user(*, user, card_id: str | None = None, w3=None) -> dict:
    """get_card: the card's state, the balance of its account (a virtual card shows its
    physical sibling's), and its daily allowance read from the Safe's Roles modifier (and the
    Delay queue), all in one JSON-RPC batch."""
    card = card_get_for_user(user=user, card_id=card_id)
    source = card.physical if card.is_virtual and card.physical else card  # virtual: inherits
    with on_chain(get_chain(source.chain_id)):  # a failing node is named by its chain
        return _card_read(card, source, w3 or chain_reader(source.chain_id))


def _card_read(card, source, w3) -> dict:
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
