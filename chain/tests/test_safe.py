"""A 1/1 Safe owned by a passkey account: EIP-1271 through Safe → fallback handler → passkey."""

from __future__ import annotations

import pytest
from web3 import Web3

from chain.dev import fund
from chain.passkey_account import SoftwarePasskey
from chain.safe import deploy_safe
from chain.tests.passkeys import deploy_passkey_account
from evm.safe import eip191_hash, safe_contract, safe_message_hash
from evm.safe_signature import contract_signature

pytestmark = pytest.mark.chain


def test_a_passkey_signs_for_its_safe_and_nobody_else_does(chain):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    dev = w3.eth.accounts[0]
    passkey, intruder = SoftwarePasskey(), SoftwarePasskey()
    account = deploy_passkey_account(w3, passkey, sender=dev)
    fund(w3, account.address, 12345)  # a deployed account: its receive() runs
    assert w3.eth.get_balance(account.address) == 12345
    safe_address = deploy_safe(w3, account.address, sender=dev)
    assert deploy_safe(w3, account.address, sender=dev) == safe_address  # idempotent
    safe = safe_contract(w3, safe_address)
    assert safe.functions.getOwners().call() == [account.address]
    message_hash = eip191_hash("picnic wants you to sign in")
    challenge = safe_message_hash(w3, safe_address, message_hash)
    good = contract_signature(
        owner=account.address, owner_signature=passkey.owner_signature(challenge)
    )
    erc1271 = w3.eth.contract(
        address=safe_address,
        abi=[
            {
                "type": "function",
                "name": "isValidSignature",
                "stateMutability": "view",
                "inputs": [{"name": "h", "type": "bytes32"}, {"name": "s", "type": "bytes"}],
                "outputs": [{"name": "", "type": "bytes4"}],
            }
        ],
    )
    assert erc1271.functions.isValidSignature(message_hash, good).call() == bytes.fromhex(
        "1626ba7e"
    )
    bad = contract_signature(
        owner=account.address, owner_signature=intruder.owner_signature(challenge)
    )
    with pytest.raises(Exception, match="GS024"):  # Safe: invalid contract signature provided
        erc1271.functions.isValidSignature(message_hash, bad).call()
