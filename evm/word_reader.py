"""Many uint256 reads of one chain as one `eth_call` (the balances of get_balances): a small
reader's creation code with the static calls packed after it, sent without `to`, so the code
runs as a constructor, makes every call and returns one uint256 per call. Nothing is deployed
and no state override is needed, so any node answers it.

The reader is hand-assembled EVM (`_PROGRAM`, 108 bytes) rather than a Solidity contract: a
Hardhat/EDR node spends its CPU per executed opcode (it traces every step), and the Solidity
constructor's ABI decoding took ~430 steps a call against ~57 here (the token's own
`balanceOf` is ~170). Ten balances cost a local node 0.55 instead of 0.87 ms of CPU. A hosted
node does not trace, so there the smaller request (58 instead of ~160 bytes a call) is all
that changes.

Layout after the code, per call: the target (20 bytes), the call data's length (2 bytes, big
endian), the call data. The answer is `abi.encode(uint256[])`, one word per call in order: a
return that is not one 32-byte word (no code at the address) reads as 0; a call that reverts
makes the whole read revert with its reason, as the call alone would.

Encoding and decoding are done by hand (eth_abi takes ~0.3 ms for ten calls, more than the rest
of our side of a chain's read)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

# EIP-3860 caps creation code at 48 KiB (nodes apply it to `eth_call` too): each call adds
# 22 bytes and its data (58 for a balanceOf), so 128 a call leaves room for longer call data.
CALLS_PER_READ = 128
MAX_CODE_BYTES = 48 * 1024

# The reader, one instruction a line ("LABEL:" marks a JUMPDEST's place; "@LABEL" is its
# offset). Stack comments: bottom → top; p = the next call's offset in the code, out = where its
# result word goes in memory (from 0x40: the answer's offset and length words go first).
_PROGRAM = """
    PUSH1 @END          ; p = the first call, right after this code
    PUSH1 0x40          ; p out
LOOP:
    JUMPDEST
    DUP2
    CODESIZE
    GT
    ISZERO
    PUSH1 @DONE
    JUMPI               ; no call left (p >= codesize): answer
    PUSH1 0x20
    DUP3
    PUSH1 0x00
    CODECOPY            ; memory[0:32] = the call's 22-byte header and what follows
    PUSH1 0x00
    MLOAD
    DUP1
    PUSH1 0x60
    SHR                 ; p out word target
    SWAP1
    PUSH1 0x50
    SHR
    PUSH2 0xffff
    AND                 ; p out target len
    DUP1
    DUP5
    PUSH1 0x16
    ADD
    DUP5
    CODECOPY            ; memory[out:out+len] = the call data
    PUSH1 0x20
    DUP4
    DUP3
    DUP2
    DUP6
    GAS
    STATICCALL          ; the return's first word lands on the call data, at out
    ISZERO
    PUSH1 @FAIL
    JUMPI
    RETURNDATASIZE
    PUSH1 0x20
    EQ
    PUSH1 @NEXT
    JUMPI
    PUSH1 0x00
    DUP4
    MSTORE              ; not one word: 0
NEXT:
    JUMPDEST            ; p out target len
    PUSH1 0x16
    ADD
    SWAP1
    POP
    SWAP1
    PUSH1 0x20
    ADD
    SWAP2
    ADD
    SWAP1               ; p+22+len out+32
    PUSH1 @LOOP
    JUMP
DONE:
    JUMPDEST
    PUSH1 0x20
    PUSH1 0x00
    MSTORE              ; the array's offset
    PUSH1 0x40
    DUP2
    SUB
    PUSH1 0x05
    SHR
    PUSH1 0x20
    MSTORE              ; its length: (out - 0x40) / 32
    PUSH1 0x00
    RETURN              ; memory[0:out]
FAIL:
    JUMPDEST
    RETURNDATASIZE
    PUSH1 0x00
    DUP1
    RETURNDATACOPY
    RETURNDATASIZE
    PUSH1 0x00
    REVERT              ; the call's revert, as it was
END:
"""

_OPCODES = {
    "ADD": 0x01, "SUB": 0x03, "GT": 0x11, "EQ": 0x14, "ISZERO": 0x15, "AND": 0x16, "SHR": 0x1C,
    "CODESIZE": 0x38, "CODECOPY": 0x39, "RETURNDATASIZE": 0x3D, "RETURNDATACOPY": 0x3E,
    "POP": 0x50, "MLOAD": 0x51, "MSTORE": 0x52, "JUMP": 0x56, "JUMPI": 0x57, "GAS": 0x5A,
    "JUMPDEST": 0x5B, "PUSH1": 0x60, "PUSH2": 0x61, "DUP1": 0x80, "DUP2": 0x81, "DUP3": 0x82,
    "DUP4": 0x83, "DUP5": 0x84, "DUP6": 0x85, "SWAP1": 0x90, "SWAP2": 0x91, "RETURN": 0xF3,
    "STATICCALL": 0xFA, "REVERT": 0xFD,
}  # fmt: skip


def assemble(program: str) -> bytes:
    """The bytecode of a `_PROGRAM`-style listing (two passes: labels first)."""
    lines = [line.split(";")[0].strip() for line in program.splitlines()]
    labels: dict[str, int] = {}
    size = 0
    for line in filter(None, lines):
        if line.endswith(":"):
            labels[line[:-1]] = size
        else:
            op = line.split()[0]
            size += 1 + (int(op[4:]) if op.startswith("PUSH") else 0)
    code = bytearray()
    for line in filter(None, lines):
        if line.endswith(":"):
            continue
        op, *arg = line.split()
        code.append(_OPCODES[op])
        if op.startswith("PUSH"):
            value = labels[arg[0][1:]] if arg[0].startswith("@") else int(arg[0], 16)
            code += value.to_bytes(int(op[4:]), "big")
    return bytes(code)


@cache
def _code() -> str:
    return "0x" + assemble(_PROGRAM).hex()


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
