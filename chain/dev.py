"""Dev-chain conveniences (the local chain ids only): funding accounts from a Hardhat dev key."""

from __future__ import annotations

from web3 import Web3

from chain import contracts
from chain.stack import DEPLOYER_KEY, LOCAL_CHAIN_IDS


def fund(w3: Web3, address: str, wei: int, *, key: str = DEPLOYER_KEY) -> None:
    if w3.eth.chain_id not in LOCAL_CHAIN_IDS:
        raise RuntimeError(
            f"refusing to use a Hardhat dev key on chain {w3.eth.chain_id} "
            f"(only on the local chains {sorted(LOCAL_CHAIN_IDS)})"
        )
    funder = w3.eth.account.from_key(key)
    tx = {
        "from": funder.address,
        "to": Web3.to_checksum_address(address),
        "value": wei,
        "nonce": w3.eth.get_transaction_count(funder.address, "pending"),
        "gas": 60_000,  # the recipient may be a deployed account whose receive() runs
        "maxFeePerGas": w3.eth.gas_price * 2,
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        "chainId": w3.eth.chain_id,
    }
    tx_hash = w3.eth.send_raw_transaction(funder.sign_transaction(tx).raw_transaction)
    w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30)


def mint(w3: Web3, symbol: str, to: str, amount: int) -> None:
    """Mint a demo ERC-20 (the deployer owns them)."""

    token = w3.eth.contract(
        address=contracts.demo_token_address(symbol),
        abi=contracts.build_artifact("DemoToken")["abi"],
    )
    owner = w3.eth.account.from_key(DEPLOYER_KEY)
    tx = token.functions.mint(Web3.to_checksum_address(to), amount).build_transaction(
        {
            "from": owner.address,
            "nonce": w3.eth.get_transaction_count(owner.address, "pending"),
            "chainId": w3.eth.chain_id,
        }
    )
    w3.eth.wait_for_transaction_receipt(
        w3.eth.send_raw_transaction(owner.sign_transaction(tx).raw_transaction)
    )


def token_balance(w3: Web3, symbol: str, owner: str) -> int:
    token = w3.eth.contract(
        address=contracts.demo_token_address(symbol),
        abi=contracts.build_artifact("DemoToken")["abi"],
    )
    return token.functions.balanceOf(Web3.to_checksum_address(owner)).call()
