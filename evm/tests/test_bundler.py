"""Revert reasons as staff and users read them."""

from __future__ import annotations

from evm.bundler import decode_revert_reason

ERROR_STRING = (
    "0x08c379a0"
    "0000000000000000000000000000000000000000000000000000000000000020"
    "0000000000000000000000000000000000000000000000000000000000000012"
    "696e73756666696369656e742066756e64730000000000000000000000000000"
)


def test_it_decodes_revert_reasons():
    assert decode_revert_reason(ERROR_STRING) == "insufficient funds"
    assert decode_revert_reason("0x") == "execution reverted"
    assert decode_revert_reason(None) == "execution reverted"
    panic = "0x4e487b71" + "00" * 31 + "11"
    assert decode_revert_reason(panic) == "panic 0x11"
    assert decode_revert_reason("0xdeadbeef") == "execution reverted (revert data 0xdeadbeef)"
    insufficient = "0xe450d38c" + "00" * 12 + "ab" * 20 + f"{5:064x}" + f"{9:064x}"
    assert decode_revert_reason(insufficient) == f"ERC20InsufficientBalance(0x{'ab' * 20}, 5, 9)"


def test_revert_data_that_does_not_decode_is_shown_raw():
    invalid_utf8 = "0x08c379a0" + f"{32:064x}" + f"{2:064x}" + "ffff" + "00" * 30
    for data in ("0x08c379a0" + "00" * 10, "0x08c379a0" + "ff" * 32, invalid_utf8):
        assert decode_revert_reason(data) == f"execution reverted (revert data {data})"
