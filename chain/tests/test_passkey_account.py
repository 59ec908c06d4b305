"""A passkey-owned ERC-4337 account: P-256 WebAuthn verified on chain, through the real bundler."""

from __future__ import annotations

import time

import pytest
from web3 import Web3

from chain import contracts
from chain.dev import fund, mint
from chain.passkey_account import SoftwarePasskey
from evm.bundler import BundlerClient, BundlerError, decode_revert_reason
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


# --- several owners -----------------------------------------------------------------------

CHAINS_AND_VERSIONS = [
    pytest.param(name, version, id=f"{name}-v{version}")
    for name in ("chain", "l2_chain")
    for version in ("0.7", "0.8")
]


# For ops whose call is meant to revert: the bundler's estimate would refuse to price them.
FIXED_GAS = {
    "callGasLimit": 300_000,
    "verificationGasLimit": 300_000,
    "preVerificationGas": 120_000,
}


def _signed(account, bundler, call, passkey, *, owner_index=0, nonce_key=0):
    op = account.build(call, bundler, nonce_key=nonce_key)
    op_hash = user_op_hash(
        op,
        entry_point=account.entry_point,
        chain_id=account.w3.eth.chain_id,
        version=account.version,
    )
    return account.sign_with(passkey, op, op_hash, owner_index=owner_index), op_hash


def _run(account, bundler, call, passkey, *, owner_index=0):
    """Sign as `owner_index`, submit, and wait for the op's receipt."""
    op, op_hash = _signed(account, bundler, call, passkey, owner_index=owner_index)
    assert _send(account, op, bundler) == op_hash
    return _receipt(bundler, op_hash)


def _new_account(w3, version="0.7"):
    first = SoftwarePasskey()
    account = PasskeyAccountClient(w3, *first.public_xy, version=version)
    fund(w3, account.address, Web3.to_wei(1, "ether"))
    return first, account


def _owner_keys(account) -> set[tuple[bytes, bytes]]:
    return {(o.qx, o.qy) for o in account.owners()}


@pytest.mark.parametrize(("chain_name", "version"), CHAINS_AND_VERSIONS)
def test_a_second_owner_signs_until_it_is_removed(request, chain_name, version):
    local = request.getfixturevalue(chain_name)
    w3 = Web3(Web3.HTTPProvider(local.rpc_url))
    bundler = BundlerClient(local.bundler_url, timeout=15)
    phone, laptop = SoftwarePasskey(), SoftwarePasskey()
    account = PasskeyAccountClient(w3, *phone.public_xy, version=version)
    fund(w3, account.address, Web3.to_wei(1, "ether"))
    address_before = account.address

    # The phone (owner 0) adds the laptop; the op also deploys the account.
    assert _run(account, bundler, account.add_owner_call(*laptop.public_xy), phone).success
    assert account.address == address_before  # owners added later do not move the account
    assert [(o.index, o.qx, o.qy) for o in account.owners()] == [
        (0, *phone.public_xy),
        (1, *laptop.public_xy),
    ]
    contract = account.contract
    assert contract.functions.ownerCount().call() == 2
    assert contract.functions.isOwner(*laptop.public_xy).call()

    # Both sign transfers, each naming its own index.
    before = w3.eth.get_balance(RECIPIENT)
    assert _run(account, bundler, account.execute(RECIPIENT, 7), phone, owner_index=0).success
    assert _run(account, bundler, account.execute(RECIPIENT, 11), laptop, owner_index=1).success
    assert w3.eth.get_balance(RECIPIENT) - before == 18
    # A passkey naming another owner's index is refused: one check, against that owner only.
    op, op_hash = _signed(account, bundler, account.execute(RECIPIENT, 1), laptop, owner_index=0)
    with pytest.raises(BundlerError, match="AA24"):
        _send(account, op, bundler)

    # ERC-1271 (the Safe and module paths) names the owner the same way.
    message = b"\x42" * 32
    assert (
        contract.functions.isValidSignature(message, laptop.owner_signature(message, owner_index=1))
        .call()
        .hex()
        == "1626ba7e"
    )

    # The phone removes the laptop: the laptop's signature now fails validation (AA24), and
    # the account says why in terms a page can put in plain words.
    removal = _run(account, bundler, account.remove_owner_call(1, *laptop.public_xy), phone)
    assert removal.success
    assert _owner_keys(account) == {phone.public_xy}
    op, op_hash = _signed(account, bundler, account.execute(RECIPIENT, 3), laptop, owner_index=1)
    with pytest.raises(BundlerError, match="AA24") as refused:
        _send(account, op, bundler)
    removed = account.removed_owner_refusal(refused.value, owner_index=1)
    assert removed is not None
    assert (removed.qx, removed.qy) == laptop.public_xy
    assert removed.block_number == removal.block_number
    assert removed.timestamp == w3.eth.get_block(removal.block_number)["timestamp"]
    # A refusal for another reason is not reported as a removal.
    assert account.removed_owner_refusal(refused.value, owner_index=0) is None
    assert (
        contract.functions.isValidSignature(message, laptop.owner_signature(message, owner_index=1))
        .call()
        .hex()
        == "ffffffff"
    )

    # The phone still signs; the last owner cannot be removed.
    assert _run(account, bundler, account.execute(RECIPIENT, 5), phone).success
    remove_last = account.remove_owner_call(0, *phone.public_xy)
    with pytest.raises(BundlerError) as refused:  # the bundler's simulation says so first
        account.build(remove_last, bundler)
    assert "PasskeyAccount: last owner" in decode_revert_reason(str(refused.value).split()[-1])
    # Submitted anyway (gas given, nothing simulated): the call reverts on chain.
    op = account.build(remove_last, bundler, gas=FIXED_GAS)
    op_hash = user_op_hash(
        op, entry_point=account.entry_point, chain_id=w3.eth.chain_id, version=version
    )
    assert _send(account, account.sign_with(phone, op, op_hash), bundler) == op_hash
    last = _receipt(bundler, op_hash)
    assert not last.success
    assert "PasskeyAccount: last owner" in last.reason
    assert _owner_keys(account) == {phone.public_xy}
    assert contract.functions.ownerCount().call() == 1
