"""A passkey-owned ERC-4337 account: P-256 WebAuthn verified on chain, through the real bundler."""

from __future__ import annotations

import pytest
from eth_abi import decode, encode
from web3 import Web3
from web3.exceptions import Web3RPCError
from web3.logs import DISCARD

from chain import contracts
from chain.dev import fund, mint
from chain.passkey_account import SoftwarePasskey
from chain.stack import DEV_KEYS
from chain.tests.passkeys import receipt_or_none, receipts_or_none
from evm.bundler import BundlerClient, BundlerError, decode_revert_reason
from evm.passkey_account import PasskeyAccountClient, RecoveryState, sign_batch
from evm.recovery import (
    execute_recovery_tx,
    new_recovery_code,
    propose_recovery_tx,
    recovery_key_from_code,
    recovery_proposal_hash,
    sign_recovery_proposal,
)
from evm.relayer import Relayer, RelayRefused
from evm.userops import pack_v07, to_rpc, user_op_hash

pytestmark = pytest.mark.chain
RECIPIENT = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"


def _send(account, op, bundler) -> str:
    return bundler.send_user_operation(to_rpc(op), account.entry_point)


def _receipt(bundler, op_hash: str, *, timeout: float = 60):
    receipt = receipt_or_none(bundler, op_hash, timeout=timeout)
    assert receipt is not None, f"no receipt for {op_hash} within {timeout}s"
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

    # A malformed or truncated envelope, or an index nobody holds, is a refusal, not a revert.
    good = laptop.owner_signature(message, owner_index=1)
    _index, _batch, auth = decode(["uint256", "bytes32[]", "bytes"], good)
    unowned = encode(["uint256", "bytes32[]", "bytes"], [2**256 - 1, [], auth])
    assert encode(["uint256", "bytes32[]", "bytes"], [1, [], auth]) == good
    for junk in (b"", b"\x00" * 31, b"\xff" * 96, good[:200], unowned):
        assert contract.functions.isValidSignature(message, junk).call().hex() == "ffffffff"

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


def _two_removals(w3, bundler, version):
    """An account with two owners (phone 0, laptop 1), and each one's op removing the other,
    signed against the same state on two nonce keys (neither waits for the other)."""
    phone, account = _new_account(w3, version)
    laptop = SoftwarePasskey()
    assert _run(account, bundler, account.add_owner_call(*laptop.public_xy), phone).success
    by_phone = _signed(
        account, bundler, account.remove_owner_call(1, *laptop.public_xy), phone, nonce_key=1
    )
    by_laptop = _signed(
        account,
        bundler,
        account.remove_owner_call(0, *phone.public_xy),
        laptop,
        owner_index=1,
        nonce_key=2,
    )
    return phone, laptop, account, by_phone, by_laptop


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_two_owners_removing_each_other_at_once_leave_exactly_one(chain, version):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    bundler = BundlerClient(chain.bundler_url, timeout=15)
    # Signed against the same state (both owners live), then submitted together.
    phone, laptop, account, (by_phone, phone_hash), (by_laptop, laptop_hash) = _two_removals(
        w3, bundler, version
    )
    sent = []
    for op in (by_phone, by_laptop):
        try:
            sent.append(_send(account, op, bundler))
        except BundlerError as exc:  # the other one already ran: refused as a removed owner
            assert "AA24" in str(exc)
    outcomes = receipts_or_none(bundler, [h for h in (phone_hash, laptop_hash) if h in sent])
    applied = [r for r in outcomes if r is not None and r.success]

    assert len(applied) == 1  # one removal happened; the other failed or never ran
    contract = account.contract
    assert contract.functions.ownerCount().call() == 1
    survivors = _owner_keys(account)
    assert survivors in ({phone.public_xy}, {laptop.public_xy})
    survivor, survivor_index, removed, removed_index = (
        (phone, 0, laptop, 1) if survivors == {phone.public_xy} else (laptop, 1, phone, 0)
    )
    # The survivor signs; the removed one is refused.
    assert _run(
        account, bundler, account.execute(RECIPIENT, 2), survivor, owner_index=survivor_index
    ).success
    op, _ = _signed(
        account, bundler, account.execute(RECIPIENT, 2), removed, owner_index=removed_index
    )
    with pytest.raises(BundlerError, match="AA24"):
        _send(account, op, bundler)


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_two_removals_in_one_bundle_leave_exactly_one_owner(chain, version):
    """The worst case of the race: one bundle validates both ops (both owners live) before
    running either. The first removal applies; the second finds the last owner and reverts."""
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    bundler = BundlerClient(chain.bundler_url, timeout=15)
    phone, laptop, account, (by_phone, _), (by_laptop, _) = _two_removals(w3, bundler, version)
    # Bundled by hand (a bundler EOA calling handleOps), so both really share one bundle.
    bundler_eoa = w3.eth.account.from_key(DEV_KEYS[6])
    packed = [{**pack_v07(op), "sender": op["sender"]} for op in (by_phone, by_laptop)]
    tx = account.entry_point_contract.functions.handleOps(
        packed, bundler_eoa.address
    ).build_transaction(
        {
            "from": bundler_eoa.address,
            "nonce": w3.eth.get_transaction_count(bundler_eoa.address, "pending"),
            "gas": 3_000_000,
            "chainId": w3.eth.chain_id,
        }
    )
    receipt = w3.eth.wait_for_transaction_receipt(
        w3.eth.send_raw_transaction(bundler_eoa.sign_transaction(tx).raw_transaction)
    )
    assert receipt["status"] == 1
    events = account.entry_point_contract.events.UserOperationEvent().process_receipt(
        receipt, errors=DISCARD
    )
    assert [e["args"]["success"] for e in events] == [True, False]
    reverts = account.entry_point_contract.events.UserOperationRevertReason().process_receipt(
        receipt, errors=DISCARD
    )
    assert "PasskeyAccount: last owner" in decode_revert_reason(
        "0x" + bytes(reverts[0]["args"]["revertReason"]).hex()
    )
    assert account.contract.functions.ownerCount().call() == 1
    assert _owner_keys(account) == {phone.public_xy}


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_one_prompt_adds_an_owner_on_both_chains(chain, l2_chain, version):
    phone, laptop = SoftwarePasskey(), SoftwarePasskey()
    sides = []
    for local in (chain, l2_chain):
        w3 = Web3(Web3.HTTPProvider(local.rpc_url))
        account = PasskeyAccountClient(w3, *phone.public_xy, version=version, batch_size=2)
        fund(w3, account.address, Web3.to_wei(1, "ether"))
        sides.append((w3, account, BundlerClient(local.bundler_url, timeout=15)))
    assert sides[0][1].address == sides[1][1].address  # one account address on both chains

    ops, hashes = [], []
    for w3, account, bundler in sides:
        op = account.build(account.add_owner_call(*laptop.public_xy), bundler)
        ops.append(op)
        hashes.append(
            user_op_hash(
                op, entry_point=account.entry_point, chain_id=w3.eth.chain_id, version=version
            )
        )
    assert hashes[0] != hashes[1]  # each binds its chain id
    before = phone.sign_count
    signed = sign_batch(phone, ops, hashes)  # one assertion: one passkey prompt
    assert phone.sign_count == before + 1
    assert signed[0]["signature"] == signed[1]["signature"]

    for (_w3, account, bundler), op, op_hash in zip(sides, signed, hashes, strict=True):
        assert _send(account, op, bundler) == op_hash
        assert _receipt(bundler, op_hash).success
        assert [(o.index, o.qx, o.qy) for o in account.owners()] == [
            (0, *phone.public_xy),
            (1, *laptop.public_xy),
        ]

    # The batch's signature approves the listed ops only: not a new op on the same account...
    w3, account, bundler = sides[0]
    other = account.build(account.execute(RECIPIENT, 1), bundler)
    with pytest.raises(BundlerError, match="AA24"):
        _send(account, {**other, "signature": signed[0]["signature"]}, bundler)
    # ... and never an ERC-1271 signature, even over a hash it lists.
    batch_signed = phone.owner_signature(b"", batch=hashes)
    listed = bytes.fromhex(hashes[0][2:])
    assert (
        account.contract.functions.isValidSignature(listed, batch_signed).call().hex() == "ffffffff"
    )
    # The laptop signs on both chains.
    for _w3, account, bundler in sides:
        assert _run(account, bundler, account.execute(RECIPIENT, 4), laptop, owner_index=1).success


# --- recovery -----------------------------------------------------------------------------

RECOVERY_DELAY = 20  # seconds of chain time; the app's default is days, the contract takes any


def _mined_status(w3, to: str, data: bytes) -> int:
    """Send with gas given (no estimate to refuse it) and return the mined status."""
    sender = w3.eth.account.from_key(DEV_KEYS[5])
    tx = {
        "from": sender.address,
        "to": to,
        "data": data,
        "gas": 300_000,
        "nonce": w3.eth.get_transaction_count(sender.address, "pending"),
        "maxFeePerGas": w3.eth.gas_price * 2,
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        "chainId": w3.eth.chain_id,
    }
    signed = sender.sign_transaction(tx)
    try:
        w3.eth.send_raw_transaction(signed.raw_transaction)
    except Web3RPCError:  # the node mines it and also answers with the revert
        pass
    return w3.eth.wait_for_transaction_receipt(signed.hash, timeout=30)["status"]


def _relay(relayer: Relayer, to: str, data: bytes):
    prepared = relayer.prepare(to=to, data=data)
    relayer.send(prepared.raw)
    receipt = relayer.receipt(prepared.hash, wait=30)
    assert receipt is not None and receipt["status"] == 1
    return receipt


@pytest.mark.parametrize(("chain_name", "version"), CHAINS_AND_VERSIONS)
def test_recovery_cancelled_at_the_last_block_then_executed_after_the_delay(
    request, chain_name, version
):
    local = request.getfixturevalue(chain_name)
    w3 = Web3(Web3.HTTPProvider(local.rpc_url))
    bundler = BundlerClient(local.bundler_url, timeout=15)
    relayer = Relayer(rpc_url=local.rpc_url, key=DEV_KEYS[3], timeout=15)
    phone, account = _new_account(w3, version)
    chain_id = w3.eth.chain_id
    code = new_recovery_code()
    key = recovery_key_from_code(code, account.address)
    assert (
        recovery_key_from_code(code.lower().replace("-", " "), account.address).address
        == key.address
    )

    assert _run(
        account, bundler, account.set_recovery_call(key.address, RECOVERY_DELAY), phone
    ).success
    assert account.recovery_state() == RecoveryState(
        key=key.address, delay=RECOVERY_DELAY, pending=None, ready_at=None, nonce=0
    )
    new_phone = SoftwarePasskey()
    qx, qy = new_phone.public_xy
    contract = account.contract
    assert contract.functions.recoveryProposalHash(qx, qy, 0).call() == recovery_proposal_hash(
        chain_id=chain_id, account=account.address, qx=qx, qy=qy, nonce=0
    )

    def proposal(signer, nonce):
        signature = sign_recovery_proposal(
            signer, chain_id=chain_id, account=account.address, qx=qx, qy=qy, nonce=nonce
        )
        return propose_recovery_tx(qx=qx, qy=qy, signature=signature)

    # Another code's key is refused on chain (sent with gas given, so the node runs it).
    wrong = recovery_key_from_code(new_recovery_code(), account.address)
    assert _mined_status(w3, account.address, proposal(wrong, 0)) == 0
    with pytest.raises(RelayRefused, match="not signed by the recovery key"):
        relayer.prepare(to=account.address, data=proposal(wrong, 0))
    assert account.recovery_state().pending is None

    first = proposal(key, 0)
    proposed = _relay(relayer, account.address, first)
    ready_at = w3.eth.get_block(proposed["blockNumber"])["timestamp"] + RECOVERY_DELAY
    state = account.recovery_state()
    assert (state.pending, state.ready_at, state.nonce) == ((qx, qy), ready_at, 1)
    with pytest.raises(RelayRefused, match="recovery not ready"):
        relayer.prepare(to=account.address, data=execute_recovery_tx())

    # The phone cancels in the last block before readyAt: cancelled.
    cancel, cancel_hash = _signed(account, bundler, account.cancel_recovery_call(), phone)
    w3.provider.make_request("evm_setNextBlockTimestamp", [ready_at - 1])
    assert _send(account, cancel, bundler) == cancel_hash
    cancelled = _receipt(bundler, cancel_hash)
    assert cancelled.success
    assert w3.eth.get_block(cancelled.block_number)["timestamp"] == ready_at - 1
    assert account.recovery_state().pending is None
    with pytest.raises(RelayRefused, match="no recovery pending"):
        relayer.prepare(to=account.address, data=execute_recovery_tx())
    # The cancelled proposal cannot be replayed: its nonce is spent.
    with pytest.raises(RelayRefused, match="not signed by the recovery key"):
        relayer.prepare(to=account.address, data=first)

    # Started again, executed once the delay has passed in chain time.
    again = _relay(relayer, account.address, proposal(key, 1))
    ready_at = w3.eth.get_block(again["blockNumber"])["timestamp"] + RECOVERY_DELAY
    assert account.recovery_state().ready_at == ready_at
    assert new_phone.public_xy not in _owner_keys(account)
    w3.provider.make_request("evm_setNextBlockTimestamp", [ready_at])
    w3.provider.make_request("evm_mine", [])
    _relay(relayer, account.address, execute_recovery_tx())
    assert account.recovery_state().pending is None
    assert _owner_keys(account) == {phone.public_xy, new_phone.public_xy}
    index = account.owner_index(qx, qy)
    assert index == 1

    # The new passkey signs; the executed proposal cannot be replayed.
    before = w3.eth.get_balance(RECIPIENT)
    assert _run(
        account, bundler, account.execute(RECIPIENT, 9), new_phone, owner_index=index
    ).success
    assert w3.eth.get_balance(RECIPIENT) - before == 9
    with pytest.raises(RelayRefused, match="not signed by the recovery key"):
        relayer.prepare(to=account.address, data=proposal(key, 1))
