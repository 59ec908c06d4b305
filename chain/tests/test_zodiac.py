"""A Gnosis Pay account on the local chain: 1/1 Safe owned by a passkey account, with the
Zodiac Delay and Roles modifiers; a daily-limit change enqueued by a relayed passkey signature,
held for the cooldown, then dispatched."""

from __future__ import annotations

import pytest
from web3 import Web3
from web3.exceptions import ContractLogicError

from chain import contracts, zodiac
from chain.passkey_account import SoftwarePasskey
from chain.safe import DelayConfig, deploy_safe
from chain.tests.passkeys import deploy_passkey_account
from evm import zodiac as modifiers
from evm.safe import safe_contract

pytestmark = pytest.mark.chain
SENTINEL = "0x0000000000000000000000000000000000000001"


def _send(w3, tx_data: bytes, to: str):
    tx = w3.eth.send_transaction(
        {"from": w3.eth.accounts[1], "to": to, "data": tx_data, "gas": 1_000_000}
    )
    return w3.eth.wait_for_transaction_receipt(tx)


def test_a_limit_change_waits_for_the_cooldown_then_runs_from_the_safe(chain):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    dev = w3.eth.accounts[0]
    passkey = SoftwarePasskey()
    account = deploy_passkey_account(w3, passkey, sender=dev)
    config = DelayConfig(cooldown=3, expiration=600)
    safe = deploy_safe(w3, account.address, sender=dev, delay=config)
    delay_address = zodiac.delay_address(safe, 3, 600)
    roles_address = zodiac.roles_address(safe)
    modules = safe_contract(w3, safe).functions.getModulesPaginated(SENTINEL, 10).call()[0]
    assert set(modules) == {delay_address, roles_address}
    delay = w3.eth.contract(address=delay_address, abi=modifiers.abi("Delay"))
    roles = w3.eth.contract(address=roles_address, abi=modifiers.abi("RolesV2"))
    assert delay.functions.isModuleEnabled(account.address).call()
    assert delay.functions.owner().call() == safe and delay.functions.txCooldown().call() == 3
    assert roles.functions.owner().call() == safe

    inner = modifiers.set_daily_allowance_call(250 * 10**18)
    data = modifiers.exec_from_module_call(roles_address, 0, inner)
    salt = b"\x07" * 32
    challenge = modifiers.module_tx_hash(
        chain_id=31337, modifier=delay_address, data=data, salt=salt
    )
    passkey_account = w3.eth.contract(
        address=account.address, abi=contracts.build_artifact("PasskeyAccount")["abi"]
    )
    assert passkey_account.functions.moduleTxHash(delay_address, data, salt).call() == challenge

    # A signature over anything else is refused by the account, on chain.
    forged = modifiers.exec_module_tx_call(
        modifier=delay_address,
        data=data,
        salt=salt,
        signature=passkey.owner_signature(b"\x01" * 32),
    )
    with pytest.raises(ContractLogicError, match="invalid passkey signature"):
        w3.eth.call({"from": w3.eth.accounts[1], "to": account.address, "data": forged})

    relayed = modifiers.exec_module_tx_call(
        modifier=delay_address, data=data, salt=salt, signature=passkey.owner_signature(challenge)
    )
    receipt = _send(w3, relayed, account.address)
    assert receipt["status"] == 1
    added = [
        log for log in receipt["logs"] if log["topics"][0].hex() == modifiers.TRANSACTION_ADDED[2:]
    ]
    assert len(added) == 1 and int.from_bytes(added[0]["topics"][1], "big") == 0
    assert delay.functions.queueNonce().call() == 1 and delay.functions.txNonce().call() == 0
    # Replaying the same signed transaction is refused.
    with pytest.raises(ContractLogicError, match="already relayed"):
        w3.eth.call({"from": w3.eth.accounts[1], "to": account.address, "data": relayed})

    dispatch = modifiers.execute_next_call(roles_address, 0, inner)
    with pytest.raises(ContractLogicError, match="cooldown"):
        w3.eth.call({"from": w3.eth.accounts[1], "to": delay_address, "data": dispatch})
    w3.provider.make_request("evm_increaseTime", [4])  # chain time, which the Delay reads
    receipt = _send(w3, dispatch, delay_address)
    assert receipt["status"] == 1
    refill, max_refill, period, balance, _ts = roles.functions.allowances(
        modifiers.SPENDING_ALLOWANCE_KEY
    ).call()
    assert (refill, max_refill, period, balance) == (250 * 10**18,) * 2 + (86400, 250 * 10**18)
    assert delay.functions.txNonce().call() == 1
