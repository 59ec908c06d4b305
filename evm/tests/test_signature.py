"""The owner signature envelope PasskeyAccount decodes: abi.encode(ownerIndex, batch, auth)."""

from __future__ import annotations

import hashlib
import json

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from eth_abi import decode, encode
from eth_utils import keccak

from evm.signature import (
    P256_N,
    batch_challenge,
    dummy_signature,
    pack_assertion,
    pack_owner_signature,
    signature_owner_index,
)

H1, H2 = "0x" + "11" * 32, "0x" + "22" * 32


def _assertion(challenge_b64: str = "A" * 43) -> dict[str, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    authenticator_data = hashlib.sha256(b"127.0.0.1").digest() + b"\x05" + b"\x00\x00\x00\x01"
    client_data_json = json.dumps(
        {"type": "webauthn.get", "challenge": challenge_b64, "origin": "http://127.0.0.1:8000"},
        separators=(",", ":"),
    ).encode()
    der = key.sign(
        authenticator_data + hashlib.sha256(client_data_json).digest(), ec.ECDSA(hashes.SHA256())
    )
    return {
        "authenticator_data": authenticator_data,
        "client_data_json": client_data_json,
        "signature_der": der,
    }


def test_an_owner_signature_names_the_owner_and_carries_the_bare_assertion():
    a = _assertion()
    packed = pack_owner_signature(owner_index=3, batch=[H1, H2], **a)
    index, batch, auth = decode(["uint256", "bytes32[]", "bytes"], bytes.fromhex(packed[2:]))
    assert index == 3
    assert list(batch) == [bytes.fromhex(H1[2:]), bytes.fromhex(H2[2:])]
    assert auth == bytes.fromhex(pack_assertion(**a)[2:])
    r, s, challenge_index, type_index, auth_data, client_data = decode(
        ["bytes32", "bytes32", "uint256", "uint256", "bytes", "string"], auth
    )
    assert int.from_bytes(s, "big") <= P256_N // 2  # low s, as P256.verify requires
    assert client_data[challenge_index:].startswith('"challenge":"')
    assert client_data[type_index:].startswith('"type":"webauthn.get"')
    assert auth_data == a["authenticator_data"]
    assert signature_owner_index(packed) == 3
    assert signature_owner_index(pack_owner_signature(owner_index=0, **a)) == 0


def test_a_bare_assertion_is_not_read_as_an_owner_signature():
    assert signature_owner_index("0x" + "ab" * 10) is None


def test_the_batch_challenge_is_keccak_of_the_abi_encoded_list_in_order():
    expected = keccak(encode(["bytes32[]"], [[bytes.fromhex(H1[2:]), bytes.fromhex(H2[2:])]]))
    assert batch_challenge([H1, H2]) == expected
    assert batch_challenge([bytes.fromhex(H1[2:]), H2]) == expected
    assert batch_challenge([H2, H1]) != expected
    with pytest.raises(ValueError):
        batch_challenge([])
    with pytest.raises(ValueError):
        batch_challenge(["0x1234"])


def test_a_negative_owner_index_is_refused():
    with pytest.raises(ValueError):
        pack_owner_signature(owner_index=-1, **_assertion())


@pytest.mark.parametrize("batch_size", [0, 2, 5])
def test_the_gas_stub_is_at_least_as_long_and_as_costly_as_a_real_signature(batch_size):
    """The bundler prices calldata from the stub: it must be an upper bound."""
    real = bytes.fromhex(
        pack_owner_signature(
            owner_index=7, batch=[H1] * batch_size, **_assertion(challenge_b64="x" * 43)
        )[2:]
    )
    stub = bytes.fromhex(dummy_signature(batch_size=batch_size)[2:])

    def calldata_gas(data: bytes) -> int:
        return sum(4 if b == 0 else 16 for b in data)

    assert len(stub) >= len(real)
    assert calldata_gas(stub) >= calldata_gas(real)
    index, batch, _auth = decode(["uint256", "bytes32[]", "bytes"], stub)
    assert len(batch) == batch_size and index > 7
