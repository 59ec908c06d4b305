"""The word reader: its request packs the calls after its code, an answer of the wrong shape is
refused, and the compiled Yul reader (chain/contracts/WordReader.yul) does what it says on a real node (every call in
order, 0 for a return that is not one word, a revert passed on; get_balances reads through it in
actions/tests/test_chains.py)."""

from __future__ import annotations

import secrets

import pytest
from eth_abi import encode
from web3 import Web3

from chain import contracts
from chain.dev import mint
from evm import word_reader
from evm.rpc import send_batches
from evm.word_reader import CALLS_PER_READ, read_words, words

TOKEN = "0x" + "ab" * 20
VAULT = "0x" + "Cd" * 20
BALANCE_OF = "0x70a08231"


def _unpack(call: tuple[str, list]) -> list[tuple[str, str]]:
    """The (to, data) pairs a read makes, parsed back from the bytes after the reader's code."""
    data = call[1][0]["data"]
    assert data.startswith(word_reader._code())
    packed, calls = bytes.fromhex(data[len(word_reader._code()) :]), []
    while packed:
        size = int.from_bytes(packed[20:22], "big")
        calls.append(("0x" + packed[:20].hex(), "0x" + packed[22 : 22 + size].hex()))
        packed = packed[22 + size :]
    return calls


def test_the_calls_are_packed_after_the_code():
    calls = [
        (TOKEN, BALANCE_OF + "00" * 12 + "11" * 20),
        (VAULT, "0x07a2d13a" + f"{10**18:064x}"),
        (TOKEN, "0x313ce567"),  # 4 bytes
        (VAULT, "0x" + "ee" * 70),  # over two words
        (TOKEN, "0x"),  # none
    ]
    (call,) = read_words(calls)
    assert call[0] == "eth_call" and call[1][1] == "latest" and "to" not in call[1][0]
    assert _unpack(call) == [(to.lower(), data) for to, data in calls]
    code_size = len(word_reader._code()) // 2 - 1
    assert len(call[1][0]["data"]) // 2 - 1 == code_size + 5 * 22 + 36 + 36 + 4 + 70


def test_the_reader_is_small_and_reads_where_its_code_ends():
    # the packed calls start at the reader's own size, so the code must not grow past what a
    # PUSH1 of `datasize` can say (and stays the ~100 bytes that make a read cheap for a node)
    code = bytes.fromhex(word_reader._code()[2:])
    assert len(code) < 128 and bytes([0x60, len(code)]) in code, code.hex()


def test_many_calls_are_split_below_the_creation_code_limit():
    calls = [(TOKEN, BALANCE_OF + f"{i:064x}") for i in range(CALLS_PER_READ + 3)]
    reads = read_words(calls)
    assert [len(_unpack(r)) for r in reads] == [CALLS_PER_READ, 3]
    assert all(len(r[1][0]["data"]) // 2 < 48 * 1024 for r in reads)
    assert _unpack(reads[1])[2] == (TOKEN, calls[-1][1])


@pytest.mark.parametrize(
    "call",
    [
        ("0x" + "ab" * 19, BALANCE_OF),  # not an address
        (TOKEN, "0x" + "00" * 0x10000),  # longer than the 2-byte length says
        (TOKEN, "0x123"),  # half a byte
    ],
)
def test_a_call_the_reader_cannot_make_is_refused(call):
    with pytest.raises(ValueError):
        read_words([call])


def test_calls_over_the_creation_code_limit_are_refused():
    with pytest.raises(ValueError):
        read_words([(TOKEN, "0x" + "00" * 500)] * CALLS_PER_READ)


def _answer(values: list[int]) -> str:
    return "0x" + encode(["uint256[]"], [values]).hex()


def test_the_words_are_read_back_in_order_across_reads():
    first = list(range(CALLS_PER_READ))
    assert words([_answer(first), _answer([7, 2**256 - 1])], CALLS_PER_READ + 2) == [
        *first,
        7,
        2**256 - 1,
    ]


@pytest.mark.parametrize(
    "results",
    [
        [None],
        ["0x"],
        [_answer([1, 2])],  # two words for three calls
        [_answer([1, 2, 3, 4])],
        [_answer([1, 2, 3])[:-2]],
        [_answer([1, 2, 3]), _answer([4])],  # an answer nobody asked for
        ["0x" + "00" * 31 + "40" + _answer([1, 2, 3])[66:]],  # not at offset 32
    ],
)
def test_an_answer_of_the_wrong_shape_is_refused(results):
    with pytest.raises(ValueError):
        words(results, 3)


def _read(url: str, calls: list[tuple[str, str]]) -> dict:
    answers, _ = send_batches({0: (url, read_words(calls))}, timeout=10)
    assert answers[0].error is None, answers[0].error
    return answers[0].body


@pytest.mark.chain
def test_the_reader_makes_every_call_on_a_real_node(chain):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    usdc, eure = contracts.demo_token_address("USDC"), contracts.demo_token_address("EURe")
    owners = ["0x" + secrets.token_hex(20) for _ in range(3)]
    for i, owner in enumerate(owners):
        mint(w3, "USDC", Web3.to_checksum_address(owner), 1_000_000 * (i + 1))
    mint(w3, "EURe", Web3.to_checksum_address(owners[2]), 5 * 10**18)
    calls = [(usdc, BALANCE_OF + "00" * 12 + owner[2:]) for owner in owners]
    calls += [
        (eure, BALANCE_OF + "00" * 12 + owners[2][2:]),
        ("0x" + "00" * 19 + "77", BALANCE_OF + "00" * 32),  # no code there: 0
        (usdc, "0x313ce567"),  # decimals(): 4 bytes of call data
        (usdc, "0x06fdde03"),  # name(): a string, not one word: 0
        (usdc, "0xdd62ed3e" + "00" * 12 + owners[0][2:] + "00" * 12 + owners[1][2:]),  # 68 bytes
    ]
    (read,) = read_words(calls)
    answer = w3.eth.call({"data": read[1][0]["data"]})
    assert words([Web3.to_hex(answer)], len(calls)) == [
        1_000_000,
        2_000_000,
        3_000_000,
        5 * 10**18,
        0,
        6,
        0,
        0,
    ]
    assert words([_read(chain.rpc_url, calls)[0]["result"]], len(calls))[:3] == [
        1_000_000,
        2_000_000,
        3_000_000,
    ]


@pytest.mark.chain
def test_a_call_that_reverts_reverts_the_read_with_its_reason(chain):
    usdc = contracts.demo_token_address("USDC")
    # transfer(address,uint256) of more than the sender holds: the token's own revert
    transfer = "0xa9059cbb" + "00" * 12 + "11" * 20 + f"{10**30:064x}"
    (answer,) = _read(chain.rpc_url, [(usdc, BALANCE_OF + "00" * 32), (usdc, transfer)])
    assert "error" in answer and "result" not in answer
    assert answer["error"]["data"] not in (None, "0x"), answer  # the token's reason, passed on
