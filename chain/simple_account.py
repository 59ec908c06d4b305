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
from evm.account import Erc4337Account
from evm.userops import user_op_hash


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
