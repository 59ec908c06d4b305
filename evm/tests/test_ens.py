"""ENS without a chain: ENSIP-15 normalisation (and its reasons), namehash, reverse names.
The reads against a real registry are in chain/tests/test_ens.py."""

from __future__ import annotations

import pytest

from evm.ens import EnsNameInvalid, namehash, normalize, reverse_name


@pytest.mark.parametrize(
    ("name", "normal"),
    [
        ("Merchant.ETH", "merchant.eth"),
        ("alice.eth", "alice.eth"),
        ("💩.eth", "💩.eth"),  # emoji labels are valid ENS names
        ("ab\u200bc.eth", "abc.eth"),  # ENSIP-15 ignores a zero-width space
    ],
)
def test_normalisation_maps_names_to_their_normal_form(name, normal):
    assert normalize(name) == normal


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("раураl.eth", "multiple groups"),  # Cyrillic р, а, у with Latin l: a mixture
        ("рау.eth", "confusable"),  # whole-script confusable with Latin "pay"
        ("a b.eth", "Invalid character"),
        ("alice..eth", "empty"),
        ("a_b.eth", "Underscores"),
        ("xn--abc.eth", "hyphens"),
        ("eth", "at least two labels"),
        ("a" * 252 + ".eth", "longer than 255"),
        ("💩" * 80 + ".eth", "longer than 255 bytes"),  # 84 characters, 324 bytes
    ],
)
def test_normalisation_refuses_names_with_the_reason(name, reason):
    with pytest.raises(EnsNameInvalid, match=reason) as refused:
        normalize(name)
    assert refused.value.code == "ens_name_invalid"


def test_namehash_matches_eip_137():
    assert namehash("") == b"\0" * 32
    assert namehash("eth").hex() == (
        "93cdeb708b7545dc668eb9280176169d1c33cfd8ed6f04690a0bcc88a93fc4ae"
    )
    assert namehash("foo.eth").hex() == (
        "de9b09fd7c5f901e23a3f19fecc54828e9c848539801e86591bd9801b019f84f"
    )


def test_reverse_name_is_the_lowercase_hex_under_addr_reverse():
    assert (
        reverse_name("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")
        == "70997970c51812dc3a010c7d01b50e0d17dc79c8.addr.reverse"
    )
    # namehash("addr.reverse") as the ReverseRegistrar has it (ADDR_REVERSE_NODE).
    assert namehash("addr.reverse").hex() == (
        "91d1777781884d03a6757a803996e38de2a42967fb37eeaca72729271025a9e2"
    )
