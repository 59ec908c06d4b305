"""Pack a WebAuthn assertion into the signature PasskeyAccount validates on chain.

The account has several owners, so every signature names the one that made it:
`abi.encode(uint256 ownerIndex, bytes32[] batch, bytes webauthnAuth)` (`pack_owner_signature`).
With an empty batch the assertion's challenge is the hash itself (userOpHash, Safe message hash,
module transaction hash). With a batch of userOpHashes the challenge is
`keccak256(abi.encode(batch))` (`batch_challenge`), and the account accepts it for any op whose
hash is listed: one passkey prompt for the same change on several chains (user operations only).

`webauthnAuth` is what OpenZeppelin's WebAuthn.tryDecodeAuth reads: the WebAuthnAuth tuple body
with no leading offset word, `abi.encode(r, s, challengeIndex, typeIndex, authenticatorData,
clientDataJSON)` as six parameters (`pack_assertion`). P256.verify only accepts low-s
signatures, so s is normalised.
"""

from __future__ import annotations

from collections.abc import Sequence

from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from eth_abi import decode, encode
from eth_abi.exceptions import DecodingError
from eth_utils import keccak

P256_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_TYPES = ["bytes32", "bytes32", "uint256", "uint256", "bytes", "string"]
_ENVELOPE = ["uint256", "bytes32[]", "bytes"]


def pack_assertion(
    *, authenticator_data: bytes, client_data_json: bytes, signature_der: bytes
) -> str:
    """The bare WebAuthnAuth (no owner index): the `webauthnAuth` part of an owner signature."""
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


def _hash_bytes(value: str | bytes) -> bytes:
    raw = bytes.fromhex(value[2:]) if isinstance(value, str) else bytes(value)
    if len(raw) != 32:
        raise ValueError(f"an op hash is 32 bytes, not {len(raw)}")
    return raw


def batch_challenge(op_hashes: Sequence[str | bytes]) -> bytes:
    """What the passkey signs when one prompt covers several user operations (one per chain):
    keccak256(abi.encode(bytes32[] batch)), the order as given (the signature carries it)."""
    if not op_hashes:
        raise ValueError("a batch names at least one op hash")
    return keccak(encode(["bytes32[]"], [[_hash_bytes(h) for h in op_hashes]]))


def pack_owner_signature(
    *,
    owner_index: int,
    batch: Sequence[str | bytes] = (),
    authenticator_data: bytes,
    client_data_json: bytes,
    signature_der: bytes,
) -> str:
    """The signature PasskeyAccount checks: owner `owner_index`'s assertion, over the hash
    itself (empty batch) or over `batch_challenge(batch)`."""
    if owner_index < 0:
        raise ValueError("owner_index is a non-negative integer")
    auth = pack_assertion(
        authenticator_data=authenticator_data,
        client_data_json=client_data_json,
        signature_der=signature_der,
    )
    return _envelope(owner_index, [_hash_bytes(h) for h in batch], bytes.fromhex(auth[2:]))


def _envelope(owner_index: int, batch: list[bytes], auth: bytes) -> str:
    return "0x" + encode(_ENVELOPE, [owner_index, batch, auth]).hex()


def signature_owner_index(signature: str | bytes) -> int | None:
    """The owner index an owner signature names (None when it is not one): which passkey an
    op was signed with, read back from the op."""
    raw = bytes.fromhex(signature[2:]) if isinstance(signature, str) else bytes(signature)
    try:
        index, _batch, _auth = decode(_ENVELOPE, raw)
    except (DecodingError, OverflowError, ValueError):
        return None
    return index


# Chrome sometimes adds this member to clientDataJSON; the stub carries it so that the gas the
# bundler prices for calldata (preVerificationGas) is an upper bound for any real assertion.
_CHROME_EXTRA = (
    ',"other_keys_can_be_added_here":"do not compare clientDataJSON against a template. '
    'See https://goo.gl/yabPex"'
)


def dummy_signature(origin: str = "http://127.0.0.1:8000", *, batch_size: int = 0) -> str:
    """Well-formed but invalid, as long as the longest real assertion over a batch of
    `batch_size` op hashes (0: the op's own hash): lets the bundler estimate gas before the
    user signs.

    Its challenge cannot be the userOpHash (the bundler simulates with gas fields of its own),
    so on chain it stops before the P-256 verification and never pays for it; the account
    client adds that cost to the estimate (`PASSKEY_VERIFICATION_GAS`)."""
    client_data = (
        '{"type":"webauthn.get","challenge":"'
        + "A" * 43
        + f'","origin":"{origin}","crossOrigin":false{_CHROME_EXTRA}}}'
    )
    # rpIdHash ‖ flags (UP|UV|BE|BS) ‖ sign count: non-zero bytes, priced like a real one.
    authenticator_data = b"\x5a" * 32 + b"\x1d" + b"\x00\x00\x01\x07"
    auth = encode(
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
    # Owner index 0 encodes as zero bytes, cheaper calldata than a larger one: price it as a
    # non-zero index (any index below 2^32 costs at most this much).
    return _envelope(0xFFFFFFFF, [b"\xee" * 32] * batch_size, auth)


def sign_as_owner(
    authenticator, challenge: str | bytes, *, owner_index: int = 0, batch: Sequence = ()
) -> str:
    """`authenticator` (anything with `get_assertion(challenge) -> {"authenticator_data",
    "client_data_json", "signature"}`: a software passkey in tests and demo data) signs as
    owner `owner_index`: over `challenge` itself, or with `batch` (which must list it) over
    the batch challenge, one assertion for every op listed (an empty `challenge` with a batch:
    the batch alone)."""
    if batch:
        if challenge and _hash_bytes(challenge) not in {_hash_bytes(h) for h in batch}:
            raise ValueError("the batch does not list this hash")
        signed = batch_challenge(batch)
    else:
        signed = _hash_bytes(challenge)
    assertion = authenticator.get_assertion(signed)
    return pack_owner_signature(
        owner_index=owner_index,
        batch=batch,
        authenticator_data=assertion["authenticator_data"],
        client_data_json=assertion["client_data_json"],
        signature_der=assertion["signature"],
    )
