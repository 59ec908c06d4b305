"""The card relayer: an EOA that pays gas for transactions the user authorised by passkey
(a signed Zodiac module transaction) and for dispatching scheduled ones after the cooldown.
It holds no authority over any account: the contracts check the passkey's signature.

Every transaction is signed here first, so its hash is known (and committed by the caller)
before it leaves; re-sending the same raw transaction after a lost answer is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import requests
from web3 import Web3
from web3.exceptions import ContractLogicError, TimeExhausted, TransactionNotFound, Web3Exception

from evm.rpc import http_web3

# The local stack's chains (chain/stack.py: the card's and the L2-like one).
DEV_CHAIN_IDS = frozenset({31337, 31338})
# Hardhat's dev keys are public: never let one sign on a real chain.
_HARDHAT_KEYS = {
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
}


class RelayError(Exception):
    pass


class RelayRefused(RelayError):
    """The chain says the transaction would revert (the reason is the revert message)."""


class RelayUnavailable(RelayError):
    """The node did not answer usably: nothing is known about the transaction's fate."""


@dataclass(frozen=True)
class PreparedTx:
    hash: str
    raw: str


_RPC_ERRORS = (requests.RequestException, Web3Exception, OSError, ValueError)


class Relayer:
    def __init__(self, *, rpc_url: str, key: str, timeout: float = 10):
        self.w3 = http_web3(rpc_url, timeout=timeout, retries=True)
        self.key = key
        self.account = self.w3.eth.account.from_key(self.key)
        self.timeout = timeout

    def prepare(self, *, to: str, data: bytes) -> PreparedTx:
        """Simulate, then sign. A revert in the simulation is a refusal: nothing is sent."""
        try:
            chain_id = self.w3.eth.chain_id
            if chain_id not in DEV_CHAIN_IDS and self.key.lower() in _HARDHAT_KEYS:
                raise RelayError(
                    "CARD_RELAYER_KEY is a public Hardhat dev key: set a real relayer key"
                )
            tx: dict[str, Any] = {
                "from": self.account.address,
                "to": Web3.to_checksum_address(to),
                "data": "0x" + data.hex(),
                "value": 0,
                "chainId": chain_id,
            }
            tx["gas"] = self.w3.eth.estimate_gas(tx) * 3 // 2
            base = self.w3.eth.get_block("latest")["baseFeePerGas"]
            tip = self.w3.eth.max_priority_fee
            tx.update(
                maxPriorityFeePerGas=tip,
                maxFeePerGas=base * 2 + tip,
                nonce=self.w3.eth.get_transaction_count(self.account.address, "pending"),
            )
        except ContractLogicError as exc:
            raise RelayRefused(_revert_reason(exc)) from None
        except _RPC_ERRORS as exc:
            raise RelayUnavailable(f"chain RPC unavailable: {exc}") from None
        signed = self.account.sign_transaction(tx)
        return PreparedTx(hash="0x" + signed.hash.hex(), raw="0x" + signed.raw_transaction.hex())

    def send(self, raw: str) -> None:
        try:
            self.w3.eth.send_raw_transaction(raw)
        except ValueError as exc:
            if "already known" in str(exc).lower() or "known transaction" in str(exc).lower():
                return
            raise RelayUnavailable(f"the node refused the transaction: {exc}") from None
        except _RPC_ERRORS as exc:
            raise RelayUnavailable(f"chain RPC unavailable: {exc}") from None

    def receipt(self, tx_hash: str, *, wait: float = 0) -> dict | None:
        """The receipt, or None while the transaction is not mined (waits up to `wait`)."""
        try:
            if wait:
                return dict(self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=wait))
            return dict(self.w3.eth.get_transaction_receipt(tx_hash))
        except (TransactionNotFound, TimeExhausted):
            return None
        except _RPC_ERRORS as exc:
            raise RelayUnavailable(f"chain RPC unavailable: {exc}") from None

    def known(self, tx_hash: str) -> bool:
        """Whether the node has the transaction at all (mined or in its pool)."""
        try:
            self.w3.eth.get_transaction(tx_hash)
            return True
        except TransactionNotFound:
            return False
        except _RPC_ERRORS as exc:
            raise RelayUnavailable(f"chain RPC unavailable: {exc}") from None


def _revert_reason(exc: ContractLogicError) -> str:
    message = str(exc.message if getattr(exc, "message", None) else exc)
    return message.removeprefix("execution reverted: ") or "execution reverted"
