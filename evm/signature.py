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


# Chrome sometimes adds this member to clientDataJSON; the stub carries it so that the gas the
# bundler prices for calldata (preVerificationGas) is an upper bound for any real assertion.
_CHROME_EXTRA = (
    ',"other_keys_can_be_added_here":"do not compare clientDataJSON against a template. '
    'See https://goo.gl/yabPex"'
)


def dummy_signature(origin: str = "http://127.0.0.1:8000") -> str:
    """Well-formed but invalid, as long as the longest real assertion: lets the bundler
    estimate gas before the user signs.

    Its challenge cannot be the userOpHash (the bundler simulates with gas fields of its own),
    so on chain it stops at the challenge check and never pays for the P-256 verification; the
    account client adds that cost to the estimate (`PASSKEY_VERIFICATION_GAS`)."""
    client_data = (
        '{"type":"webauthn.get","challenge":"'
        + "A" * 43
        + f'","origin":"{origin}","crossOrigin":false{_CHROME_EXTRA}}}'
    )
    # rpIdHash ‖ flags (UP|UV|BE|BS) ‖ sign count: non-zero bytes, priced like a real one.
    authenticator_data = b"\x5a" * 32 + b"\x1d" + b"\x00\x00\x01\x07"
    encoded = encode(
        _TYPES,
        [
            b"\xfe" * 32,
            b"\x7e" * 32,
            client_data.index('"challenge"'),
            1,
            authenticator_data,
            client_data,
        ],
    )
    return "0x" + encoded.hex()
