"""What every ERC-4337 account client shares: the EntryPoint, nonce, initCode, fees and gas
from the bundler. evm/passkey_account.py is the one production uses; the local stack's
EOA-owned SimpleAccount (chain/simple_account.py) is the reference the tests and demo use."""

from __future__ import annotations

from typing import Any

from web3 import Web3

from evm.artifacts import artifact
from evm.bundler import BundlerClient
from evm.userops import ENTRY_POINT_ADDRESSES, to_rpc

# Well-formed 65-byte signature for gas estimation (the real one is made after).
DUMMY_SIGNATURE = "0x" + "f" * 31 + "0" * 33 + "7" + "a" * 63 + "1c"  # r ‖ s (low) ‖ v


class Erc4337Account:
    """What every account client shares: nonce, initCode, fees and gas."""

    w3: Web3
    version: str
    factory: Any
    account_abi: list
    dummy_signature: str = DUMMY_SIGNATURE

    def _setup(self) -> None:
        self.entry_point = ENTRY_POINT_ADDRESSES[self.version]
        self.entry_point_contract = self.w3.eth.contract(
            address=self.entry_point, abi=artifact(self.version, "EntryPoint")["abi"]
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
        nonce_key: int = 0,
    ) -> dict[str, Any]:
        """An unsigned op: initCode fields when undeployed, nonce, fees and gas from the bundler.

        `nonce_key` picks one of the EntryPoint's parallel nonce sequences (ops on different
        keys do not wait for each other)."""
        sender = self.address
        op: dict[str, Any] = {
            "sender": sender,
            "nonce": self.entry_point_contract.functions.getNonce(sender, nonce_key).call(),
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
