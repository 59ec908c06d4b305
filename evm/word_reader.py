"""Many uint256 reads of one chain as one `eth_call` (the balances of get_balances): a small
reader's creation code with the static calls packed after it, sent without `to`, so the code
runs as a constructor, makes every call and returns one uint256 per call. Nothing is deployed
and no state override is needed, so any node answers it.

The reader is a Yul object (chain/contracts/WordReader.yul; its code is in evm/artifacts.json),
not a Solidity constructor: a Hardhat/EDR node spends its CPU per executed opcode (it traces
every step), and Solidity's ABI decoding of the arguments took ~430 steps a call against ~60
in the Yul loop (the token's own `balanceOf` is ~170). Ten balances cost a local node 0.55
instead of 0.87 ms of CPU. A hosted node does not trace, so there the smaller request (58
instead of ~160 bytes a call) is all that changes.

Layout after the code, per call: the target (20 bytes), the call data's length (2 bytes, big
endian), the call data. The answer is `abi.encode(uint256[])`, one word per call in order: a
return that is not one 32-byte word (no code at the address) reads as 0; a call that reverts
makes the whole read revert with its reason, as the call alone would.

Encoding and decoding are done by hand (eth_abi takes ~0.3 ms for ten calls, more than the rest
of our side of a chain's read)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from evm.artifacts import build_artifact

# EIP-3860 caps creation code at 48 KiB (nodes apply it to `eth_call` too): each call adds
# 22 bytes and its data (58 for a balanceOf), so 128 a call leaves room for longer call data.
CALLS_PER_READ = 128
MAX_CODE_BYTES = 48 * 1024


@cache
def _code() -> str:
    return build_artifact("WordReader")["bytecode"]


def _pack(calls: Sequence[tuple[str, str]]) -> str:
    """The calls as the reader reads them: target, data length, data; as hex."""
    parts = []
    for to, data in calls:
        body = data[2:]
        if len(to) != 42 or len(body) % 2 or len(body) // 2 > 0xFFFF:
            raise ValueError(f"not a call the word reader can make: {to!r}, {data[:80]!r}")
        parts += [to[2:].lower(), f"{len(body) // 2:04x}", body]
    return "".join(parts)


def read_words(calls: Sequence[tuple[str, str]]) -> list[tuple[str, list]]:
    """The JSON-RPC calls (`eth_call` without `to`, at "latest") that make every `(to, data)`
    static call, `CALLS_PER_READ` a call: to send in one batch, then `words` of their results."""
    reads = []
    for i in range(0, len(calls), CALLS_PER_READ):
        data = _code() + _pack(calls[i : i + CALLS_PER_READ])
        if len(data) // 2 - 1 > MAX_CODE_BYTES:
            raise ValueError(f"the calls' data is over {MAX_CODE_BYTES} bytes for one read")
        reads.append(("eth_call", [{"data": data}, "latest"]))
    return reads


def words(results: Sequence[object], count: int) -> list[int]:
    """The `count` uint256 the results of `read_words` answer, in the order of the calls.
    ValueError when a result is not what the reader returns (a uint256[] of its calls'
    length)."""
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
