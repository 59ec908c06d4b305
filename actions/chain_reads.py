"""How the app reads the chains: network I/O, bounded by CHAIN_READ_TIMEOUT_SECONDS (an agent
is waiting). One JSON-RPC batch per chain and the chains at once from one thread
(`read_batches`); reads of several round trips per chain (the history sync) in a thread per
chain (`read_chains`); one token balance; what a node that is down or answers garbage raises
(`CHAIN_RPC_ERRORS`). The read tools built on it (get_balances, get_card) are in
tool_reads.py; it sits below the rooms, which use it too."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import requests
from django.conf import settings
from web3.exceptions import Web3Exception, Web3RPCError

from actions.evm_clients import chain_rpc
from core.api import failure_reason
from core.chains import Chain, get_chain
from core.errors import Unavailable
from core.metrics import count_provider_error, observe_provider_request, web3_error_kind
from evm.rpc import send_batches

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
