"""A passkey-owned ERC-4337 account: P-256 WebAuthn verified on chain, through the real bundler."""

from __future__ import annotations

import time

import pytest
from web3 import Web3

from chain import contracts
from chain.dev import fund, mint
from chain.passkey_account import SoftwarePasskey
from evm.bundler import BundlerClient, BundlerError
from evm.passkey_account import PasskeyAccountClient
from evm.userops import to_rpc, user_op_hash

pytestmark = pytest.mark.chain
RECIPIENT = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"


def _send(account, op, bundler) -> str:
    return bundler.send_user_operation(to_rpc(op), account.entry_point)


def _receipt(bundler, op_hash: str, *, timeout: float = 60):
    """Polled here, not with core.testing.wait_until: chain/ imports no app (test_boundary)."""
    deadline = time.monotonic() + timeout
    while (receipt := bundler.get_user_operation_receipt(op_hash)) is None:
        assert time.monotonic() < deadline, f"no receipt for {op_hash} within {timeout}s"
        time.sleep(0.2)
    return receipt


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_a_passkey_signed_user_operation_moves_demo_usdc(chain, version):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    bundler = BundlerClient(chain.bundler_url, timeout=15)
    passkey = SoftwarePasskey()
    account = PasskeyAccountClient(w3, *passkey.public_xy, version=version)
    fund(w3, account.address, Web3.to_wei(1, "ether"))
    mint(w3, "USDC", account.address, 10_000_000)  # 10 USDC (6 decimals)
    usdc = w3.eth.contract(
        address=contracts.demo_token_address("USDC"),
        abi=contracts.build_artifact("DemoToken")["abi"],
    )
    before = usdc.functions.balanceOf(RECIPIENT).call()
    call = account.execute(
        usdc.address, 0, Web3.to_bytes(hexstr=usdc.encode_abi("transfer", [RECIPIENT, 1_500_000]))
    )
    op = account.build(call, bundler)
    op_hash = user_op_hash(
        op, entry_point=account.entry_point, chain_id=w3.eth.chain_id, version=version
    )
    signed = account.sign_with(passkey, op, op_hash)
    assert _send(account, signed, bundler) == op_hash
    receipt = _receipt(bundler, op_hash)
    assert receipt.success
    assert usdc.functions.balanceOf(RECIPIENT).call() - before == 1_500_000
    assert account.is_deployed()
    assert usdc.functions.decimals().call() == 6


def test_another_passkeys_signature_is_refused_by_validation(chain):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    bundler = BundlerClient(chain.bundler_url, timeout=15)
    owner, intruder = SoftwarePasskey(), SoftwarePasskey()
    account = PasskeyAccountClient(w3, *owner.public_xy)
    fund(w3, account.address, Web3.to_wei(1, "ether"))
    op = account.build(account.execute(RECIPIENT, 1), bundler)
    op_hash = user_op_hash(
        op, entry_point=account.entry_point, chain_id=w3.eth.chain_id, version="0.7"
    )
    with pytest.raises(BundlerError, match="AA24"):
        _send(account, account.sign_with(intruder, op, op_hash), bundler)
    # A genuine assertion over a different challenge is refused too.
    other_hash = "0x" + "11" * 32
    with pytest.raises(BundlerError, match="AA24"):
        _send(account, account.sign_with(owner, op, other_hash), bundler)


def test_demo_tokens_are_deployed_with_their_decimals(chain):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    abi = contracts.build_artifact("DemoToken")["abi"]
    for symbol, (_name, decimals, _salt) in contracts.DEMO_TOKENS.items():
        token = w3.eth.contract(address=contracts.demo_token_address(symbol), abi=abi)
        assert (token.functions.symbol().call(), token.functions.decimals().call()) == (
            symbol,
            decimals,
        )
