"""Build and sign user operations for eth-infinitism's SimpleAccount with an EOA owner key.

The local stack's reference account: tests and demo data use it to send real user operations
through the real bundler. (Passkey-owned accounts are the signing page's business.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_account.messages import encode_defunct
from web3 import Web3

from chain import contracts
from evm.bundler import BundlerClient
from evm.userops import ENTRY_POINT_ADDRESSES, to_rpc, user_op_hash

# Well-formed 65-byte signature for gas estimation (the real one is made after).
DUMMY_SIGNATURE = "0x" + "f" * 31 + "0" * 33 + "7" + "a" * 63 + "1c"  # r ‖ s (low) ‖ v


class Erc4337Account:
    """What every account of the local stack shares: nonce, initCode, fees and gas."""

    w3: Web3
    version: str
    factory: Any
    account_abi: list
    dummy_signature: str = DUMMY_SIGNATURE

    def _setup(self) -> None:
        self.entry_point = ENTRY_POINT_ADDRESSES[self.version]
        self.entry_point_contract = self.w3.eth.contract(
            address=self.entry_point, abi=contracts.artifact(self.version, "EntryPoint")["abi"]
        )

    @property
    def address(self) -> str:
        raise NotImplementedError

    def factory_data(self) -> str:
        raise NotImplementedError

    def is_deployed(self) -> bool:
        return self.w3.eth.get_code(self.address) not in (b"", None)

    def execute(self, target: str, value: int = 0, data: bytes = b"") -> str:
        account = self.w3.eth.contract(address=self.address, abi=self.account_abi)
        return account.encode_abi("execute", [Web3.to_checksum_address(target), value, data])

    def build(
        self,
        call_data: str,
        bundler: BundlerClient,
        *,
        gas: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """An unsigned op: initCode fields when undeployed, nonce, fees and gas from the bundler."""
        sender = self.address
        op: dict[str, Any] = {
            "sender": sender,
            "nonce": self.entry_point_contract.functions.getNonce(sender, 0).call(),
            "callData": call_data,
            "signature": self.dummy_signature,
        }
        if not self.is_deployed():
            op["factory"] = self.factory.address
            op["factoryData"] = self.factory_data()
        fees = bundler.gas_price()["fast"]
        op["maxFeePerGas"] = int(fees["maxFeePerGas"], 16)
        op["maxPriorityFeePerGas"] = int(fees["maxPriorityFeePerGas"], 16)
        if gas is None:
            estimate = bundler.estimate_user_operation_gas(to_rpc(op), self.entry_point)
            gas = {
                "callGasLimit": int(estimate["callGasLimit"], 16),
                "verificationGasLimit": int(estimate["verificationGasLimit"], 16),
                "preVerificationGas": int(estimate["preVerificationGas"], 16),
            }
        op.update(gas)
        return op


@dataclass
class SimpleAccountOwner(Erc4337Account):
    w3: Web3
    owner_key: str
    version: str = "0.7"
    salt: int = 0

    def __post_init__(self) -> None:
        self._setup()
        self.owner = Account.from_key(self.owner_key)
        self.factory = self.w3.eth.contract(
            address=contracts.simple_account_factory_address(self.version),
            abi=contracts.artifact(self.version, "SimpleAccountFactory")["abi"],
        )
        self.account_abi = contracts.artifact(self.version, "SimpleAccount")["abi"]

    @property
    def address(self) -> str:
        return self.factory.functions.getAddress(self.owner.address, self.salt).call()

    def factory_data(self) -> str:
        return self.factory.encode_abi("createAccount", [self.owner.address, self.salt])

    def sign(self, op: dict[str, Any], *, chain_id: int) -> dict[str, Any]:
        digest = user_op_hash(
            op, entry_point=self.entry_point, chain_id=chain_id, version=self.version
        )
        if self.version == "0.7":
            # v0.7 SimpleAccount recovers over the EIP-191 prefixed hash.
            signed = self.owner.sign_message(encode_defunct(hexstr=digest))
        else:
            # v0.8 SimpleAccount recovers over the raw (EIP-712) userOpHash.
            signed = self.owner.unsafe_sign_hash(digest)
        return {**op, "signature": "0x" + signed.signature.hex().removeprefix("0x")}
