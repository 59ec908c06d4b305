"""Chain reads of the read tools: network I/O, bounded by CHAIN_READ_TIMEOUT_SECONDS (an agent
is waiting). Token balances (get_balances) on every chain of the table, one JSON-RPC batch per
chain and the chains in parallel (`read_chains`), and the card's balance and allowance
(get_card, on the card's chain). The database queries they need are in selectors.py, the JSON
shapes in presenters.py."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import requests
from django.conf import settings
from web3.exceptions import Web3Exception

from actions.presenters import card_summary, decimal_string
from actions.selectors import card_get_for_user, smart_accounts_for_user, tokens_on_chains
from core.chains import Chain, all_chains
from picnic.api import failure_reason
from picnic.formats import rfc3339

logger = logging.getLogger(__name__)
T = TypeVar("T")

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


def chain_reader(chain_id: int):
    """web3 on one chain's node for the read tools, bounded by CHAIN_READ_TIMEOUT_SECONDS (an
    agent is waiting)."""
    from actions.evm_clients import chain_rpc

    return chain_rpc(chain_id, timeout=settings.CHAIN_READ_TIMEOUT_SECONDS)


@dataclass
class ChainOutcome(Generic[T]):
    """What one chain's read gave: its value, or the error that names why it has none."""

    chain: Chain
    value: T | None = None
    error: str | None = None
    exception: BaseException | None = field(default=None, repr=False)

    def entry(self, **extra: Any) -> dict[str, Any]:
        """The chain's line in a read tool's `chains` list: who it is, and its error or null."""
        return {
            "chainId": self.chain.id,
            "caip2": self.chain.caip2,
            "name": self.chain.name,
            **extra,
            "error": self.error,
        }


def chain_error(chain: Chain, exc: BaseException) -> str:
    """The per-chain error an agent reads: which chain (by name) and why, never where."""
    return f"The chain {chain.name} could not be read: {failure_reason(exc)}"[:500]


def read_chains(
    chain_list: Sequence[Chain],
    read: Callable[[Chain, Any], T],
    *,
    readers: Mapping[int, Any] | None = None,
    alongside: Callable[[], Any] | None = None,
) -> tuple[list[ChainOutcome[T]], Any]:
    """`read(chain, w3)` on every chain at once, one thread each, so N chains cost about one
    chain's round trip; bounded by CHAIN_READ_TIMEOUT_SECONDS (a chain still busy then is
    reported timed out, its thread left to end on its own client timeout). A chain whose node
    fails (CHAIN_RPC_ERRORS) gets an error naming it; the others keep their values. Anything
    else is a bug and propagates. `alongside` runs in this thread meanwhile (the prices), its
    result returned second. `read` must not touch the database (other threads, other
    connections): read what it needs before, write what it found after."""
    outcomes = [ChainOutcome(chain) for chain in chain_list]
    if not outcomes:
        return outcomes, alongside() if alongside else None
    timeout = settings.CHAIN_READ_TIMEOUT_SECONDS
    pool = ThreadPoolExecutor(max_workers=len(outcomes), thread_name_prefix="chain-read")
    try:
        futures = [
            # Each in a copy of this context: the trace and the request's log fields follow.
            pool.submit(
                contextvars.copy_context().run,
                read,
                o.chain,
                (readers or {}).get(o.chain.id) or chain_reader(o.chain.id),
            )
            for o in outcomes
        ]
        beside = alongside() if alongside else None
        wait(futures, timeout=timeout + 0.5)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for outcome, future in zip(outcomes, futures, strict=True):
        if not future.done():
            logger.warning(
                "chain read on %s did not answer within %ss", outcome.chain.name, timeout
            )
            outcome.error = f"The chain {outcome.chain.name} could not be read: timed out"
            continue
        exc = future.exception()
        if exc is None:
            outcome.value = future.result()
        elif isinstance(exc, CHAIN_RPC_ERRORS):
            logger.warning("chain read on %s failed: %r", outcome.chain.name, exc)
            outcome.error, outcome.exception = chain_error(outcome.chain, exc), exc
        else:
            raise exc  # a bug of ours: not disguised as an outage
    return outcomes, beside


class ChainsUnavailable(Exception):
    """Every chain a read needed failed: there is nothing true to answer with (503)."""

    def __init__(self, outcomes: Sequence[ChainOutcome]) -> None:
        self.outcomes = list(outcomes)
        if len(self.outcomes) == 1:
            message = self.outcomes[0].error or "The chain could not be read"
        else:
            names = ", ".join(o.chain.name for o in self.outcomes)
            reasons = "; ".join(
                f"{o.chain.name}: {failure_reason(o.exception) if o.exception else 'timed out'}"
                for o in self.outcomes
            )
            message = f"The chains {names} could not be read ({reasons})"
        super().__init__(message[:500])


def _balance_of(w3, token_address: str, owner: str):
    """An `eth_call` of ERC-20 `balanceOf(owner)`, to add to a JSON-RPC batch."""
    from web3 import Web3

    data = Web3.keccak(text="balanceOf(address)")[:4] + bytes(12) + bytes.fromhex(owner[2:])
    return w3.eth.call({"to": Web3.to_checksum_address(token_address), "data": data})


def _read_balances(w3, pairs: list, vaults: list) -> tuple[list[int], dict[int, int]]:
    """One chain's balances: every balanceOf and each vault's share price in one JSON-RPC
    batch (one HTTP round trip)."""
    from web3 import Web3

    to_assets = Web3.keccak(text="convertToAssets(uint256)")[:4]
    with w3.batch_requests() as batch:
        for account, token in pairs:
            batch.add(_balance_of(w3, token.address, account.address))
        for vault in vaults:
            data = to_assets + (10**vault.decimals).to_bytes(32, "big")
            batch.add(w3.eth.call({"to": Web3.to_checksum_address(vault.address), "data": data}))
        results = batch.execute()
    with node_answer("the balances batch"):
        if len(results) != len(pairs) + len(vaults):
            raise ChainAnswerError(f"{len(results)} answers to {len(pairs) + len(vaults)} calls")
        words = [int.from_bytes(bytes(r), "big") if len(bytes(r)) == 32 else 0 for r in results]
    return words[: len(pairs)], dict(zip((v.pk for v in vaults), words[len(pairs) :], strict=True))


def balances_for_user(*, user, readers: Mapping[int, Any] | None = None) -> dict:
    """Token balances of the user's accounts on every configured chain: one JSON-RPC batch per
    chain, the chains in parallel (and the prices beside them), with fiat values when the price
    source answers (none at all when it does not). A chain that fails is listed in `chains`
    with its error, the others' balances are still served; if every chain failed there is
    nothing true to show: ChainsUnavailable (503). `readers` replaces a chain's web3 (tests)."""
    from decimal import Decimal

    from actions.providers.prices import FIAT, PriceError, prices

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

    outcomes, price_table = read_chains(
        asked,
        lambda chain, w3: _read_balances(w3, *plans[chain.id]),
        readers=readers,
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
    from actions.evm_clients import on_chain
    from core.chains import get_chain

    card = card_get_for_user(user=user, card_id=card_id)
    source = card.physical if card.is_virtual and card.physical else card  # virtual: inherits
    with on_chain(get_chain(source.chain_id)):  # a failing node is named by its chain
        return _card_read(card, source, w3 or chain_reader(source.chain_id))


def _card_read(card, source, w3) -> dict:
    from datetime import UTC, datetime

    from web3 import Web3

    from chain import zodiac

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
