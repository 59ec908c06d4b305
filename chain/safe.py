"""Deploying 1/1 Safes owned by a passkey account on the local stack, optionally with the Gnosis
Pay layout (Delay + Roles, chain/zodiac.py) set up in the same call.

Gnosis Pay accounts are Safes; here the Safe's single owner is the user's PasskeyAccount, so a
SIWE message for the Safe is signed by the passkey: the assertion's challenge is the Safe's
message hash (evm/safe.py), and Safe → CompatibilityFallbackHandler → PasskeyAccount verify it
on chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_abi import encode
from eth_utils import keccak
from web3 import Web3

from chain import contracts, zodiac
from evm.safe import safe_contract

ZERO = "0x0000000000000000000000000000000000000000"


@dataclass(frozen=True)
class DelayConfig:
    """The card account's Delay modifier: seconds before a queued transaction may run, and
    seconds after that before it expires (0: never)."""

    cooldown: int
    expiration: int


def setup_data(w3: Web3, owner: str, delay: DelayConfig | None = None) -> bytes:
    """Safe.setup for a 1/1 Safe; with `delay`, the Gnosis Pay layout (Delay + Roles, the owner
    enabled as the Delay's module) set up in the same call through GnosisPaySetup."""
    singleton = safe_contract(w3, contracts.safe_address("Safe"))
    to, data = ZERO, b""
    if delay is not None:
        to = zodiac.setup_helper_address()
        data = zodiac.setup_call(module=owner, cooldown=delay.cooldown, expiration=delay.expiration)
    return Web3.to_bytes(
        hexstr=singleton.encode_abi(
            "setup",
            [
                [Web3.to_checksum_address(owner)],
                1,
                to,
                data,
                contracts.safe_address("CompatibilityFallbackHandler"),
                ZERO,
                0,
                ZERO,
            ],
        )
    )


def predicted_safe_address(
    w3: Web3, owner: str, salt_nonce: int = 0, delay: DelayConfig | None = None
) -> str:
    """CREATE2 address of SafeProxyFactory.createProxyWithNonce(singleton, setup, nonce)."""
    factory = contracts.safe_address("SafeProxyFactory")
    proxy_code = (
        w3.eth.contract(address=factory, abi=contracts.safe_artifact("SafeProxyFactory")["abi"])
        .functions.proxyCreationCode()
        .call()
    )
    init = keccak(setup_data(w3, owner, delay))
    salt = keccak(init + salt_nonce.to_bytes(32, "big"))
    deployment = proxy_code + encode(["address"], [contracts.safe_address("Safe")])
    return Web3.to_checksum_address(
        keccak(b"\xff" + Web3.to_bytes(hexstr=factory) + salt + keccak(deployment))[12:]
    )


def deploy_safe(
    w3: Web3,
    owner: str,
    *,
    sender: str,
    salt_nonce: int = 0,
    delay: DelayConfig | None = None,
) -> str:
    """Deploy (idempotently) the 1/1 Safe of `owner`; returns its address."""
    address = predicted_safe_address(w3, owner, salt_nonce, delay)
    if w3.eth.get_code(address):
        return address
    factory = w3.eth.contract(
        address=contracts.safe_address("SafeProxyFactory"),
        abi=contracts.safe_artifact("SafeProxyFactory")["abi"],
    )
    tx = factory.functions.createProxyWithNonce(
        contracts.safe_address("Safe"), setup_data(w3, owner, delay), salt_nonce
    ).transact({"from": sender})
    receipt = w3.eth.wait_for_transaction_receipt(tx)
    if receipt["status"] != 1:
        raise RuntimeError(f"Safe deployment for {owner} reverted (tx {tx.hex()})")
    return address
