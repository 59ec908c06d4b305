"""The spend-permission client off chain: calldata, the session key's signature, nonce keys and
the checks a grant gets before anything is sent. On chain: chain/tests/test_spend_permission.py."""

from __future__ import annotations

import pytest
from eth_abi import decode
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import keccak

from evm import spend_permission as sp
from evm.signature import dummy_signature

TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
SHOP = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
PID = bytes(range(32))
OP_HASH = "0x" + "ab" * 32


def _grant(**overrides):
    args = {
        "permission_id": PID,
        "session_key": SHOP,
        "token": TOKEN,
        "allowance": 50_000_000,
        "period_seconds": sp.WEEKLY,
        "start": 1_000,
        "end": 2_000,
        "recipients": [SHOP],
        "any_recipient": False,
    }
    return sp.grant_data(**{**args, **overrides})


def test_periods_are_fixed_lengths_and_monthly_is_thirty_days():
    assert sp.PERIODS == {"daily": 86_400, "weekly": 7 * 86_400, "monthly": 30 * 86_400}


def test_the_grant_encodes_every_field_in_order():
    data = _grant()
    assert (
        data[:4]
        == keccak(
            text="grantPermission(bytes32,address,address,uint160,uint48,uint48,uint48,address[],bool)"
        )[:4]
    )
    fields = decode(
        [
            "bytes32",
            "address",
            "address",
            "uint160",
            "uint48",
            "uint48",
            "uint48",
            "address[]",
            "bool",
        ],
        data[4:],
    )
    assert fields == (
        PID,
        SHOP.lower(),
        TOKEN.lower(),
        50_000_000,
        sp.WEEKLY,
        1_000,
        2_000,
        (SHOP.lower(),),
        False,
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"allowance": 0}, "allowance"),
        ({"allowance": -5}, "allowance"),
        ({"allowance": 2**160}, "allowance"),
        ({"period_seconds": 0}, "period"),
        ({"end": 1_000}, "end must come after"),
        ({"start": -1}, "end must come after"),
        ({"recipients": [], "any_recipient": False}, "recipients or allow any"),
        ({"recipients": [SHOP], "any_recipient": True}, "recipients or allow any"),
        ({"recipients": ["0x" + "00" * 20]}, "recipient must be"),
        ({"token": "merchant.eth"}, "token must be"),
        ({"session_key": "0x" + "00" * 20}, "session key must be"),
        ({"permission_id": b"\x01" * 31}, "32 bytes"),
    ],
)
def test_a_grant_the_account_would_refuse_is_refused_before_sending(overrides, message):
    with pytest.raises(sp.InvalidGrant, match=message):
        _grant(**overrides)


def test_the_spend_call_is_exactly_execute_permitted():
    data = bytes.fromhex(sp.spend_call_data(permission_id=PID, to=SHOP, amount=7)[2:])
    assert len(data) == 4 + 3 * 32  # what validation requires, byte for byte
    assert data[:4] == keccak(text="executePermitted(bytes32,address,uint256)")[:4]
    assert decode(["bytes32", "address", "uint256"], data[4:]) == (PID, SHOP.lower(), 7)


def test_the_session_key_signs_the_op_hash_as_an_eip191_message():
    address, key = sp.new_session_key()
    signature = sp.sign_with_session_key(OP_HASH, key, permission_id=PID)
    marker, pid, ecdsa = decode(["uint256", "bytes32", "bytes"], bytes.fromhex(signature[2:]))
    assert (marker, pid, len(ecdsa)) == (2**256 - 1, PID, 65)
    message = encode_defunct(primitive=bytes.fromhex(OP_HASH[2:]))
    assert Account.recover_message(message, signature=ecdsa) == address
    assert sp.permission_signature_id(signature) == PID
    # The estimation stub is as long as a real signature (the bundler prices its calldata).
    assert len(sp.dummy_permission_signature(PID)) == len(signature)


def test_an_owner_signature_or_junk_names_no_permission():
    assert sp.permission_signature_id(dummy_signature()) is None
    assert sp.permission_signature_id("0x" + "ff" * 32) is None  # the marker, nothing after
    assert sp.permission_signature_id(b"") is None


def test_session_keys_and_ids_are_fresh_each_time():
    assert sp.new_session_key()[0] != sp.new_session_key()[0]
    assert sp.permission_id() != sp.permission_id()
    assert len(sp.permission_id()) == 32


def test_nonce_keys_are_the_permissions_own_lanes():
    key = sp.nonce_key_for(PID)
    assert key >> 32 == int.from_bytes(PID[:20], "big")
    assert key < 2**192  # an EntryPoint nonce key is 192 bits
    assert sp.nonce_key_for(PID, 5) == key | 5
    with pytest.raises(ValueError, match="32-bit"):
        sp.nonce_key_for(PID, 2**32)
