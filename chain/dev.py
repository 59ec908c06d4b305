"""Dev-chain conveniences (chain id 31337 only): funding accounts from a Hardhat dev key."""

from __future__ import annotations

from web3 import Web3

from chain.stack import DEPLOYER_KEY


def fund(w3: Web3, address: str, wei: int, *, key: str = DEPLOYER_KEY) -> None:
    if w3.eth.chain_id != 31337:
        raise RuntimeError("refusing to use a Hardhat dev key on a chain other than 31337")
    funder = w3.eth.account.from_key(key)
    tx = {
        "from": funder.address,
        "to": Web3.to_checksum_address(address),
        "value": wei,
        "nonce": w3.eth.get_transaction_count(funder.address, "pending"),
        "gas": 21_000,
        "maxFeePerGas": w3.eth.gas_price * 2,
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        "chainId": w3.eth.chain_id,
    }
    tx_hash = w3.eth.send_raw_transaction(funder.sign_transaction(tx).raw_transaction)
    w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30)
