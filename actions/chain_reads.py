"""Chain reads of the read tools: network I/O, bounded by CHAIN_READ_TIMEOUT_SECONDS (an agent
is waiting). Token balances (get_balances) on every chain of the table, one JSON-RPC batch per
chain and the chains at once from one thread (`read_batches`); reads of several round trips
per chain (the history sync) in a thread per chain (`read_chains`); and the card's balance and allowance
(get_card, on the card's chain). The database queries they need are in the rooms' selectors.py, the JSON
shapes in presenters.py."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

import requests
from django.conf import settings
from web3 import Web3
from web3.exceptions import Web3Exception, Web3RPCError

from actions.accounts.selectors import smart_accounts_for_user, tokens_on_chains
from actions.card.selectors import card_get_for_user
from actions.evm_clients import chain_rpc, on_chain
from actions.presenters import card_summary, decimal_string
from actions.providers.prices import FIAT, PriceError, prices
from core.api import failure_reason
from core.chains import Chain, all_chains, get_chain
from core.errors import Unavailable
from core.formats import rfc3339
from core.metrics import count_provider_error, observe_provider_request, web3_error_kind
from evm import zodiac
from evm.rpc import send_batches
from evm.word_reader import read_words, words

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


_readers: dict[tuple[int, str, float], Any] = {}
_readers_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def chain_reader(chain_id: int):
    """web3 on one chain's node for the read tools, bounded by CHAIN_READ_TIMEOUT_SECONDS (an
    agent is waiting). One per chain, URL and timeout, kept: building a Web3 costs
    milliseconds, and its HTTP sessions (one per thread) keep their connections."""
    timeout = settings.CHAIN_READ_TIMEOUT_SECONDS
    key = (chain_id, get_chain(chain_id).rpc_url, timeout)
    with _readers_lock:
        if key not in _readers:
            _readers[key] = chain_rpc(chain_id, timeout=timeout)
        return _readers[key]


def _read_pool() -> ThreadPoolExecutor:
    """The threads the chains are read in, kept across requests (a thread's start costs more
    than a local node's answer); made on first use, so after a server's fork."""
    global _pool
    with _readers_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="chain-read")
        return _pool


def batch_results(answers: Any, count: int) -> list[Any]:
    """The `result` of each of the `count` calls of a JSON-RPC batch, in the order they were
    sent (a node may answer in any order: matched by id when the answers carry theirs). A
    JSON-RPC error is raised as one, an answer of the wrong shape as ChainAnswerError."""
    if isinstance(answers, dict) and answers.get("error") is not None:
        raise Web3RPCError(str(answers["error"]), rpc_response=answers)
    with node_answer("a JSON-RPC batch"):
        if not isinstance(answers, list) or len(answers) != count:
            raise ChainAnswerError(f"{count} calls answered with {str(answers)[:200]!r}")
        if all(isinstance(a, dict) and isinstance(a.get("id"), int) for a in answers):
            answers = sorted(answers, key=lambda a: a["id"])
        results = []
        for answer in answers:
            if answer.get("error") is not None:
                raise Web3RPCError(str(answer["error"]), rpc_response=answer)
            results.append(answer["result"])
    return results


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
    """`read(chain, w3)` on every chain at once, so N chains cost about one chain's round
    trip: the first in this thread, the others each in a pool thread; bounded by
    CHAIN_READ_TIMEOUT_SECONDS (a chain still busy then is reported timed out, its thread left
    to end on its own client timeout). A chain whose node fails (CHAIN_RPC_ERRORS) gets an
    error naming it; the others keep their values. Anything else is a bug and propagates.
    `alongside` runs in this thread first (the prices), its result returned second. `read`
    must not touch the database (other threads, other connections): read what it needs
    before, write what it found after."""
    outcomes = [ChainOutcome(chain) for chain in chain_list]
    if not outcomes:
        return outcomes, alongside() if alongside else None
    timeout = settings.CHAIN_READ_TIMEOUT_SECONDS
    deadline = time.monotonic() + timeout + 0.5

    def run(outcome: ChainOutcome) -> T:
        w3 = (readers or {}).get(outcome.chain.id) or chain_reader(outcome.chain.id)
        return read(outcome.chain, w3)

    pool = _read_pool() if len(outcomes) > 1 else None
    # Each in a copy of this context: the trace and the request's log fields follow.
    others = [pool.submit(contextvars.copy_context().run, run, o) for o in outcomes[1:]]
    try:
        beside = alongside() if alongside else None
        here: Future = Future()
        try:
            here.set_result(run(outcomes[0]))
        except Exception as exc:  # noqa: BLE001 - judged below, like the pool threads' errors
            here.set_exception(exc)
        if others:
            wait(others, timeout=max(0.0, deadline - time.monotonic()))
    finally:
        for future in others:
            future.cancel()  # still queued: not started late; running: ends on its timeout
    futures = [here, *others]
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


def read_batches(
    batches: Mapping[Chain, list[tuple[str, list]]],
    *,
    parse: Callable[[Chain, list[Any]], T],
    alongside: Callable[[], Any] | None = None,
) -> tuple[list[ChainOutcome[T]], Any]:
    """One JSON-RPC batch per chain, every chain's sent before any answer is read and all
    from this thread (`evm.rpc.send_batches`), so N chains cost about one chain's round trip
    without a second Python thread taking turns with this one on the GIL; bounded by
    CHAIN_READ_TIMEOUT_SECONDS. Each outcome's value is `parse(chain, results)`; a chain whose
    node refuses, hangs or answers garbage (ChainAnswerError from `parse` too) gets an error
    naming it, the others keep their values.
    `alongside` runs while the nodes work (the prices), its result returned second."""
    outcomes = [ChainOutcome(chain) for chain in batches]
    answers, beside = send_batches(
        {o.chain.id: (o.chain.rpc_url, batches[o.chain]) for o in outcomes},
        timeout=settings.CHAIN_READ_TIMEOUT_SECONDS,
        meanwhile=alongside,
    )
    for outcome in outcomes:
        answer = answers[outcome.chain.id]
        observe_provider_request("chain_rpc", answer.seconds)
        try:
            if answer.error is not None:
                raise answer.error
            results = batch_results(answer.body, len(batches[outcome.chain]))
            outcome.value = parse(outcome.chain, results)
        except CHAIN_RPC_ERRORS as exc:
            count_provider_error("chain_rpc", web3_error_kind(exc))
            logger.warning("chain read on %s failed: %r", outcome.chain.name, exc)
            outcome.error, outcome.exception = chain_error(outcome.chain, exc), exc
    return outcomes, beside


class ChainsUnavailable(Unavailable):
    """Every chain a read needed failed: there is nothing true to answer with (503)."""

    code = "chain_unavailable"

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

    data = Web3.keccak(text="balanceOf(address)")[:4] + bytes(12) + bytes.fromhex(owner[2:])
    return w3.eth.call({"to": Web3.to_checksum_address(token_address), "data": data})


BALANCE_OF = "0x70a08231"  # balanceOf(address)
CONVERT_TO_ASSETS = "0x07a2d13a"  # convertToAssets(uint256), ERC-4626


def _eth_call(to: str, data: str) -> tuple[str, list]:
    return ("eth_call", [{"to": to, "data": data}, "latest"])


def token_balance(chain_id: int, token_address: str, owner: str) -> int:
    """One ERC-20 balance in units (the signing page's "before"), bounded like every read;
    raises one of CHAIN_RPC_ERRORS when the node cannot say."""
    call = _eth_call(token_address, BALANCE_OF + owner[2:].lower().rjust(64, "0"))
    answers, _ = send_batches(
        {chain_id: (get_chain(chain_id).rpc_url, [call])},
        timeout=settings.CHAIN_READ_TIMEOUT_SECONDS,
    )
    answer = answers[chain_id]
    if answer.error is not None:
        raise answer.error
    (result,) = batch_results(answer.body, 1)
    return _word(result)


def _word(result: Any) -> int:
    """A uint256 return value; anything that is not one 32-byte word reads as 0 (as a token
    contract that is not there answers "0x")."""
    if not isinstance(result, str) or not result.startswith("0x"):
        raise ChainAnswerError(f"eth_call answered {str(result)[:80]!r}")
    body = result[2:]
    return int(body, 16) if len(body) == 64 else 0


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
