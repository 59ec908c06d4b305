"""The word reader's encoding is the ABI's, and an answer of the wrong shape is refused (the
reads themselves run against the real nodes in actions/tests/test_chains.py)."""

from __future__ import annotations

import pytest
from eth_abi import decode, encode

from evm import word_reader
from evm.word_reader import CALLS_PER_READ, read_words, words

TOKEN = "0x" + "ab" * 20
VAULT = "0x" + "Cd" * 20


def _args(call: tuple[str, list]) -> tuple:
    data = call[1][0]["data"]
    assert data.startswith(word_reader._code())
    return decode(["address[]", "bytes[]"], bytes.fromhex(data[len(word_reader._code()) :]))


def test_the_calls_are_abi_encoded_after_the_creation_code():
    calls = [
        (TOKEN, "0x70a08231" + "00" * 12 + "11" * 20),
        (VAULT, "0x07a2d13a" + f"{10**18:064x}"),
        (TOKEN, "0x313ce567"),  # 4 bytes: padded to a word
        (VAULT, "0x" + "ee" * 70),  # over two words
    ]
    (call,) = read_words(calls)
    assert call[0] == "eth_call" and call[1][1] == "latest" and "to" not in call[1][0]
    expected = encode(
        ["address[]", "bytes[]"],
        [[to for to, _ in calls], [bytes.fromhex(data[2:]) for _, data in calls]],
    ).hex()
    assert call[1][0]["data"] == word_reader._code() + expected


def test_many_calls_are_split_below_the_creation_code_limit():
    calls = [(TOKEN, "0x70a08231" + f"{i:064x}") for i in range(CALLS_PER_READ + 3)]
    reads = read_words(calls)
    assert [len(_args(r)[0]) for r in reads] == [CALLS_PER_READ, 3]
    assert all(len(r[1][0]["data"]) // 2 < 48 * 1024 for r in reads)
    assert _args(reads[1])[1][2] == bytes.fromhex(calls[-1][1][2:])


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
