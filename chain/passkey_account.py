"""A software WebAuthn authenticator, for tests and demo data where no browser is involved.

It produces the same assertion a browser does (authenticatorData, clientDataJSON, DER signature
over authenticatorData ‖ sha256(clientDataJSON)). The browser path is tested with Chromium's
virtual authenticator. The passkey account's client is evm/passkey_account.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cbor2
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from evm.signature import sign_as_owner


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class SoftwarePasskey:
    rp_id: str = "127.0.0.1"
    origin: str = "http://127.0.0.1:8000"
    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    credential_id: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    sign_count: int = 0
    user_verified: bool = True

    @property
    def public_xy(self) -> tuple[bytes, bytes]:
        numbers = self.key.public_key().public_numbers()
        return numbers.x.to_bytes(32, "big"), numbers.y.to_bytes(32, "big")

    def create(self, challenge: bytes, *, origin: str | None = None) -> dict[str, Any]:
        """A registration response ("none" attestation) in the JSON shape browsers send."""

        x, y = self.public_xy
        cose_key = cbor2.dumps({1: 2, 3: -7, -1: 1, -2: x, -3: y})
        flags = 0x01 | (0x04 if self.user_verified else 0) | 0x40  # UP, UV, AT
        auth_data = (
            hashlib.sha256(self.rp_id.encode()).digest()
            + bytes([flags])
            + self.sign_count.to_bytes(4, "big")
            + bytes(16)
            + len(self.credential_id).to_bytes(2, "big")
            + self.credential_id
            + cose_key
        )
        client_data_json = json.dumps(
            {
                "type": "webauthn.create",
                "challenge": b64url(challenge),
                "origin": origin or self.origin,
            },
            separators=(",", ":"),
        ).encode()
        attestation = cbor2.dumps({"fmt": "none", "attStmt": {}, "authData": auth_data})
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(client_data_json),
                "attestationObject": b64url(attestation),
                "transports": ["internal"],
            },
        }

    def get_json(self, challenge: bytes, *, origin: str | None = None) -> dict[str, Any]:
        """An authentication response in the JSON shape browsers send."""
        assertion = self.get_assertion(challenge, origin=origin)
        return {
            "id": b64url(self.credential_id),
            "rawId": b64url(self.credential_id),
            "type": "public-key",
            "response": {
                "clientDataJSON": b64url(assertion["client_data_json"]),
                "authenticatorData": b64url(assertion["authenticator_data"]),
                "signature": b64url(assertion["signature"]),
                "userHandle": None,
            },
        }

    def get_assertion(self, challenge: bytes, *, origin: str | None = None) -> dict[str, bytes]:
        self.sign_count += 1
        flags = 0x01 | (0x04 if self.user_verified else 0)  # UP, UV
        authenticator_data = (
            hashlib.sha256(self.rp_id.encode()).digest()
            + bytes([flags])
            + self.sign_count.to_bytes(4, "big")
        )
        client_data_json = json.dumps(
            {
                "type": "webauthn.get",
                "challenge": b64url(challenge),
                "origin": origin or self.origin,
                "crossOrigin": False,
            },
            separators=(",", ":"),
        ).encode()
        signature = self.key.sign(
            authenticator_data + hashlib.sha256(client_data_json).digest(),
            ec.ECDSA(hashes.SHA256()),
        )
        return {
            "credential_id": self.credential_id,
            "authenticator_data": authenticator_data,
            "client_data_json": client_data_json,
            "signature": signature,
        }

    def owner_signature(
        self, hash_: bytes, *, owner_index: int = 0, batch: Sequence[str | bytes] = ()
    ) -> bytes:
        """What a PasskeyAccount checks, signed by this passkey as owner `owner_index`: an
        assertion over `hash_` (ERC-1271, module transactions, one op) or, with `batch`, over
        the batch challenge (ops on several chains)."""
        packed = sign_as_owner(self, hash_, owner_index=owner_index, batch=batch)
        return bytes.fromhex(packed[2:])
