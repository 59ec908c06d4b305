"""Recovery codes, the key they control, and the proposal hash the recovery key signs."""

from __future__ import annotations

import pytest
from eth_account import Account
from eth_account.messages import encode_typed_data

from evm.recovery import (
    CODE_SYMBOLS,
    InvalidRecoveryCode,
    new_recovery_code,
    normalize_recovery_code,
    propose_recovery_tx,
    recovery_key_from_code,
    recovery_proposal_hash,
    sign_recovery_proposal,
)

ACCOUNT = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
OTHER = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
CODE = "7Q2KD-MZX4P-0A1BC-DEFGH-JKMNP"


def test_a_new_code_is_25_unambiguous_symbols_in_five_groups():
    codes = {new_recovery_code() for _ in range(20)}
    assert len(codes) == 20
    for code in codes:
        groups = code.split("-")
        assert [len(g) for g in groups] == [5] * 5
        assert not set(code) & set("ILOU")
        assert normalize_recovery_code(code) == code.replace("-", "")
    assert CODE_SYMBOLS * 5 >= 100  # bits


def test_typing_variants_of_a_code_give_the_same_key():
    key = recovery_key_from_code(CODE, ACCOUNT)
    assert recovery_key_from_code("7q2kd mzx4p oa1bc defgh jkmnp", ACCOUNT).address == key.address
    assert recovery_key_from_code("7Q2KDMZX4P0AIBCDEFGHJKMNP", ACCOUNT.lower()).address == (
        key.address
    )


def test_the_key_depends_on_the_code_and_the_account():
    key = recovery_key_from_code(CODE, ACCOUNT)
    assert recovery_key_from_code(CODE, OTHER).address != key.address
    assert recovery_key_from_code(CODE.replace("7", "8"), ACCOUNT).address != key.address


@pytest.mark.parametrize("code", ["", "7Q2KD-MZX4P", CODE + "X", "7Q2KD-MZX4P-0A1BC-DEFGH-JKMN!"])
def test_malformed_codes_are_refused(code):
    with pytest.raises(InvalidRecoveryCode):
        normalize_recovery_code(code)


def test_the_proposal_hash_is_standard_eip712():
    """Checked against eth_account's own EIP-712 encoder (the contract's view is checked on the
    local chain in chain/tests/test_passkey_account.py)."""
    qx, qy = b"\x01" * 32, b"\x02" * 32
    ours = recovery_proposal_hash(chain_id=31338, account=ACCOUNT, qx=qx, qy=qy, nonce=5)
    message = encode_typed_data(
        full_message={
            "types": {
                "EIP712Domain": [
                    {"name": "name", "type": "string"},
                    {"name": "version", "type": "string"},
                    {"name": "chainId", "type": "uint256"},
                    {"name": "verifyingContract", "type": "address"},
                ],
                "RecoveryProposal": [
                    {"name": "qx", "type": "bytes32"},
                    {"name": "qy", "type": "bytes32"},
                    {"name": "nonce", "type": "uint256"},
                ],
            },
            "primaryType": "RecoveryProposal",
            "domain": {
                "name": "PasskeyAccount",
                "version": "1",
                "chainId": 31338,
                "verifyingContract": ACCOUNT,
            },
            "message": {"qx": qx, "qy": qy, "nonce": 5},
        }
    )
    key = recovery_key_from_code(CODE, ACCOUNT)
    signature = sign_recovery_proposal(key, chain_id=31338, account=ACCOUNT, qx=qx, qy=qy, nonce=5)
    assert Account.recover_message(message, signature=signature) == key.address
    assert recovery_proposal_hash(chain_id=31337, account=ACCOUNT, qx=qx, qy=qy, nonce=5) != ours
    assert recovery_proposal_hash(chain_id=31338, account=OTHER, qx=qx, qy=qy, nonce=5) != ours
    assert recovery_proposal_hash(chain_id=31338, account=ACCOUNT, qx=qx, qy=qy, nonce=6) != ours
    assert len(propose_recovery_tx(qx=qx, qy=qy, signature=signature)) == 4 + 32 * 3 + 32 + 96
