"""Pack a WebAuthn assertion into the signature PasskeyAccount validates on chain.

OpenZeppelin's WebAuthn.tryDecodeAuth reads the WebAuthnAuth tuple body directly (no leading
offset word): `abi.encode(r, s, challengeIndex, typeIndex, authenticatorData, clientDataJSON)`
as six parameters. P256.verify only accepts low-s signatures, so s is normalised.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from eth_abi import encode

P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_TYPES = ["bytes32", "bytes32", "uint256", "uint256", "bytes", "string"]


def pack_assertion(
    *, authenticator_data: bytes, client_data_json: bytes, signature_der: bytes
) -> str:
    r, s = decode_dss_signature(signature_der)
    if s > P256_N // 2:
        s = P256_N - s
    client_data = client_data_json.decode()
    challenge_index = client_data.index('"challenge":"')
    type_index = client_data.index('"type":"')
    encoded = encode(
        _TYPES,
        [
            r.to_bytes(32, "big"),
            s.to_bytes(32, "big"),
            challenge_index,
            type_index,
            authenticator_data,
            client_data,
        ],
    )
    return "0x" + encoded.hex()


def dummy_signature() -> str:
    """Well-formed but invalid: lets the bundler estimate gas before the user signs."""
    client_data = (
        '{"type":"webauthn.get","challenge":"' + "A" * 43 + '","origin":"http://127.0.0.1:8000"}'
    )
    encoded = encode(
        _TYPES,
        [
            b"\x01" * 32,
            b"\x01" * 32,
            client_data.index('"challenge"'),
            1,
            b"\x00" * 37,
            client_data,
        ],
    )
    return "0x" + encoded.hex()
