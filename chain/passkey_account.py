"""Passkey-owned accounts on the local stack, and a software WebAuthn authenticator.

The software authenticator produces the same assertion a browser does (authenticatorData,
clientDataJSON, DER signature over authenticatorData ‖ sha256(clientDataJSON)); tests and demo
data use it where no browser is involved. The browser path is tested with Chromium's virtual
authenticator.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from web3 import Web3

from chain import contracts
from chain.simple_account import Erc4337Account
from evm.signature import dummy_signature, pack_assertion

# What a real assertion costs in validateUserOp beyond the estimation stub, which stops at the
# challenge check: base64url of the challenge compared, two SHA-256 and the P256VERIFY
# precompile (EIP-7951). Measured on the local stack (OpenZeppelin 5.7, osaka): 9,400 gas more
# for a deployed account (52,164-52,176 vs 42,770-42,800 for validateUserOp alone), the same on
# EntryPoint v0.7 and v0.8. Doubled for the EntryPoint's 63/64 forwarding and for longer
# clientDataJSON from other browsers; unused verification gas is not charged, so the margin
# costs the user nothing. A chain without P256VERIFY runs OpenZeppelin's Solidity verifier
# (hundreds of thousands of gas) and needs a measured budget of its own.
PASSKEY_VERIFICATION_GAS = 20_000


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
        import cbor2

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


@dataclass
class PasskeyAccountClient(Erc4337Account):
    w3: Web3
    qx: bytes
    qy: bytes
    version: str = "0.7"
    salt: int = 0
    origin: str = "http://127.0.0.1:8000"

    def __post_init__(self) -> None:
        self._setup()
        self.factory = self.w3.eth.contract(
            address=contracts.passkey_factory_address(self.version),
            abi=contracts.build_artifact("PasskeyAccountFactory")["abi"],
        )
        self.account_abi = contracts.build_artifact("PasskeyAccount")["abi"]
        self.dummy_signature = dummy_signature(self.origin)

    @property
    def address(self) -> str:
        return self.factory.functions.getAddress(self.qx, self.qy, self.salt).call()

    def build(self, call_data, bundler, *, gas=None):
        op = super().build(call_data, bundler, gas=gas)
        if gas is None:  # the bundler's estimate ran the stub, not the real verification
            op["verificationGasLimit"] += PASSKEY_VERIFICATION_GAS
        return op

    def factory_data(self) -> str:
        return self.factory.encode_abi("createAccount", [self.qx, self.qy, self.salt])

    def execute_batch(self, calls: list[tuple[str, int, bytes]]) -> str:
        account = self.w3.eth.contract(address=self.address, abi=self.account_abi)
        targets = [Web3.to_checksum_address(target) for target, _, _ in calls]
        return account.encode_abi(
            "executeBatch",
            [targets, [value for _, value, _ in calls], [data for _, _, data in calls]],
        )

    def sign_with(
        self, passkey: SoftwarePasskey, op: dict[str, Any], op_hash: str
    ) -> dict[str, Any]:
        assertion = passkey.get_assertion(bytes.fromhex(op_hash[2:]))
        signature = pack_assertion(
            authenticator_data=assertion["authenticator_data"],
            client_data_json=assertion["client_data_json"],
            signature_der=assertion["signature"],
        )
        return {**op, "signature": signature}
