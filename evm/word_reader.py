"""Many uint256 reads of one chain as one `eth_call` (the balances of get_balances): the
WordReader contract's creation code with the static calls appended, sent without `to`, so the
constructor makes every call and its return is the call's result. Nothing is deployed and no
state override is needed, so any node answers it. A node spends most of a small `eth_call` on
the call itself (a local Hardhat node about 0.2 ms of CPU each, logging included), not on the
code it runs: ten `balanceOf` in one call cost it about half of ten calls in one batch.

Encoding and decoding are done by hand (eth_abi takes ~0.3 ms for ten calls, more than the rest
of our side of a chain's read)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from evm.artifacts import build_artifact

# EIP-3860 caps creation code at 48 KiB (nodes apply it to `eth_call` too): each call adds
# ~160 bytes to the reader's ~1 KiB, so 128 a call leaves room for longer call data.
CALLS_PER_READ = 128


@cache
def _code() -> str:
    return build_artifact("WordReader")["bytecode"]


def _word(value: int) -> str:
    return f"{value:064x}"


def _encode(calls: Sequence[tuple[str, str]]) -> str:
    """abi.encode(address[] targets, bytes[] calls) of `(to, data)` pairs, as hex."""
    n = len(calls)
    targets = [_word(n)] + [to[2:].lower().rjust(64, "0") for to, _ in calls]
    heads, tails, at = [], [], 32 * n  # bytes[] offsets count from after its length word
    for _, data in calls:
        body = data[2:]
        size = len(body) // 2
        heads.append(_word(at))
        tails.append(_word(size) + body + "0" * (-len(body) % 64))
        at += 32 + -(-size // 32) * 32
    return "".join([_word(64), _word(64 + 32 * (n + 1)), *targets, _word(n), *heads, *tails])


def read_words(calls: Sequence[tuple[str, str]]) -> list[tuple[str, list]]:
    """The JSON-RPC calls (`eth_call` without `to`, at "latest") that make every `(to, data)`
    static call, `CALLS_PER_READ` a call: to send in one batch, then `words` of their results."""
    return [
        ("eth_call", [{"data": _code() + _encode(calls[i : i + CALLS_PER_READ])}, "latest"])
        for i in range(0, len(calls), CALLS_PER_READ)
    ]


def words(results: Sequence[object], count: int) -> list[int]:
    """The `count` uint256 the results of `read_words` answer, in the order of the calls (0 for
    a call whose return was not one word). ValueError when a result is not what the reader
    returns (a uint256[] of its calls' length)."""
    out: list[int] = []
    for i, result in enumerate(results):
        expected = min(CALLS_PER_READ, count - i * CALLS_PER_READ)
        if not isinstance(result, str) or not result.startswith("0x"):
            raise ValueError(f"the word reader answered {str(result)[:80]!r}")
        body = result[2:]
        if len(body) != 64 * (2 + expected) or int(body[:64], 16) != 32:
            raise ValueError(f"the word reader answered {result[:200]!r} for {expected} calls")
        if int(body[64:128], 16) != expected:
            raise ValueError(f"the word reader answered {result[:200]!r} for {expected} calls")
        out += [int(body[j : j + 64], 16) for j in range(128, len(body), 64)]
    if len(out) != count:
        raise ValueError(f"the word reader answered {len(out)} words for {count} calls")
    return out
