"""The passkey-owned ERC-4337 account (our PasskeyAccount, from chain/contracts/, deployed by
its factory at a CREATE2 address): its address, initCode and calls, the user operations the
signing page builds, and the gas its real verification costs beyond the bundler's estimate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from web3 import Web3

from evm.account import Erc4337Account
from evm.artifacts import build_artifact, passkey_factory_address
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


class Authenticator(Protocol):
    """What signs an op's hash off the browser (chain.passkey_account.SoftwarePasskey)."""

    def get_assertion(self, challenge: bytes) -> dict[str, bytes]: ...


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
            address=passkey_factory_address(self.version),
            abi=build_artifact("PasskeyAccountFactory")["abi"],
        )
        self.account_abi = build_artifact("PasskeyAccount")["abi"]
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

    def sign_with(self, passkey: Authenticator, op: dict[str, Any], op_hash: str) -> dict[str, Any]:
        assertion = passkey.get_assertion(bytes.fromhex(op_hash[2:]))
        signature = pack_assertion(
            authenticator_data=assertion["authenticator_data"],
            client_data_json=assertion["client_data_json"],
            signature_der=assertion["signature"],
        )
        return {**op, "signature": signature}
