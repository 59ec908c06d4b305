"""Safe 1.4.1 as production talks to it: the contract handle, and the message hash a Safe's
owner signs for EIP-1271 (Safe → CompatibilityFallbackHandler → the owner's isValidSignature).
Deploying Safes is the local stack's: chain/safe.py."""

from __future__ import annotations

from eth_abi import encode
from eth_utils import keccak
from web3 import Web3

from evm.artifacts import safe_address, safe_artifact


def safe_contract(w3: Web3, address: str):
    return w3.eth.contract(
        address=Web3.to_checksum_address(address), abi=safe_artifact("Safe")["abi"]
    )


def eip191_hash(message: str) -> bytes:
    data = message.encode()
    return keccak(b"\x19Ethereum Signed Message:\n" + str(len(data)).encode() + data)


def safe_message_hash(w3: Web3, safe: str, data_hash: bytes) -> bytes:
    """What the owner signs for Safe.isValidSignature(data_hash, …): the Safe's EIP-712
    SafeMessage hash of abi.encode(data_hash)."""
    handler = w3.eth.contract(
        address=safe_address("CompatibilityFallbackHandler"),
        abi=safe_artifact("CompatibilityFallbackHandler")["abi"],
    )
    return handler.functions.getMessageHashForSafe(
        Web3.to_checksum_address(safe), encode(["bytes32"], [data_hash])
    ).call()
