"""Spend permissions of the passkey account, through the real bundler and EntryPoints: an owner
grants once with the passkey, then a session key spends within the allowance with no passkey,
and everything outside the permission is refused on chain."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
from eth_abi import decode, encode
from web3 import Web3
from web3.exceptions import ContractCustomError, ContractLogicError
from web3.logs import DISCARD

from chain import contracts
from chain.dev import fund, mint
from chain.passkey_account import SoftwarePasskey
from chain.stack import DEV_KEYS
from chain.tests.passkeys import receipt_or_none, receipts_or_none
from evm import spend_permission as sp
from evm.bundler import BundlerClient, BundlerError, decode_revert_reason
from evm.passkey_account import PasskeyAccountClient
from evm.userops import pack_v07, to_rpc, user_op_hash

pytestmark = pytest.mark.chain

SHOP = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
CAFE = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
STRANGER = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"
USDC = 1_000_000  # one USDC (6 decimals)
# For ops meant to revert in execution: the bundler's estimate would refuse to price them.
FIXED_GAS = {"callGasLimit": 200_000, "verificationGasLimit": 200_000, "preVerificationGas": 80_000}
VERSIONS = ["0.7", "0.8"]


def _now(w3) -> int:
    return w3.eth.get_block("latest")["timestamp"]


def _started(w3) -> int:
    """A start the bundler takes: Alto compares validAfter with its wall clock, and chain time
    runs ahead of it once a test has advanced it."""
    return min(_now(w3), int(time.time())) - 60


def _advance(w3, seconds: int) -> None:
    w3.provider.make_request("evm_increaseTime", [seconds])
    w3.provider.make_request("evm_mine", [])


@dataclass
class Setup:
    w3: Web3
    bundler: BundlerClient
    passkey: SoftwarePasskey
    account: PasskeyAccountClient
    usdc: object  # the token contract
    last_reverts: list[str] = field(default_factory=list)  # of the last _hand_bundle

    def balance(self, who: str) -> int:
        return self.usdc.functions.balanceOf(Web3.to_checksum_address(who)).call()

    def owner_op(self, call: str, *, nonce_key: int = 0) -> tuple[dict, str]:
        op = self.account.build(call, self.bundler, nonce_key=nonce_key)
        op_hash = user_op_hash(
            op,
            entry_point=self.account.entry_point,
            chain_id=self.w3.eth.chain_id,
            version=self.account.version,
        )
        return self.account.sign_with(self.passkey, op, op_hash), op_hash

    def run_owner(self, call: str):
        op, op_hash = self.owner_op(call)
        self.bundler.send_user_operation(to_rpc(op), self.account.entry_point)
        receipt = receipt_or_none(self.bundler, op_hash)
        assert receipt is not None and receipt.success, receipt
        return receipt

    def grant(
        self,
        *,
        allowance: int,
        period: int = sp.WEEKLY,
        start: int | None = None,
        end: int | None = None,
        recipients=(SHOP,),
        any_recipient: bool = False,
        **swaps,
    ) -> sp.SessionKeyAccount:
        """One owner-signed op installs a permission (and deploys the account on first use);
        returns the session key's view of it."""
        now = _now(self.w3)
        session_address, session_key = sp.new_session_key()
        pid = sp.permission_id()
        self.run_owner(
            sp.grant_call(
                self.account,
                permission_id=pid,
                session_key=session_address,
                token=self.usdc.address,
                allowance=allowance,
                period_seconds=period,
                start=_started(self.w3) if start is None else start,
                end=now + 30 * 86_400 if end is None else end,
                recipients=list(recipients),
                any_recipient=any_recipient,
                **swaps,
            )
        )
        return sp.SessionKeyAccount(
            self.w3, self.account.address, pid, session_key, version=self.account.version
        )


def _setup(local, version: str, passkey: SoftwarePasskey | None = None) -> Setup:
    w3 = Web3(Web3.HTTPProvider(local.rpc_url))
    passkey = passkey or SoftwarePasskey()
    account = PasskeyAccountClient(w3, *passkey.public_xy, version=version)
    fund(w3, account.address, Web3.to_wei(1, "ether"))
    mint(w3, "USDC", account.address, 100 * USDC)
    usdc = w3.eth.contract(
        address=contracts.demo_token_address("USDC"),
        abi=contracts.build_artifact("DemoToken")["abi"],
    )
    return Setup(w3, BundlerClient(local.bundler_url, timeout=15), passkey, account, usdc)


def _spend(s: Setup, key: sp.SessionKeyAccount, to: str, amount: int, **kw):
    op_hash = key.send_spend(s.bundler, to=to, amount=amount, **kw)
    return receipt_or_none(s.bundler, op_hash)


def _send_signed(s: Setup, key: sp.SessionKeyAccount, op: dict) -> str:
    signed, op_hash = key.sign(op)
    s.bundler.send_user_operation(to_rpc(signed), key.entry_point)
    return op_hash


@pytest.mark.parametrize(
    ("chain_name", "version"),
    [pytest.param(c, v, id=f"{c}-v{v}") for c in ("chain", "l2_chain") for v in VERSIONS],
)
def test_signed_once_then_spends_without_the_passkey_until_the_allowance(
    request, chain_name, version
):
    s = _setup(request.getfixturevalue(chain_name), version)
    key = s.grant(allowance=10 * USDC, recipients=[SHOP, CAFE])
    permission = sp.read_permission(s.w3, s.account.address, key.permission_id)
    assert permission is not None
    assert (permission.token, permission.allowance, permission.period) == (
        s.usdc.address,
        10 * USDC,
        sp.WEEKLY,
    )
    assert not permission.any_recipient
    assert sp.is_recipient(s.w3, s.account.address, key.permission_id, CAFE)
    assert not sp.is_recipient(s.w3, s.account.address, key.permission_id, STRANGER)
    assert sp.spendable(s.w3, s.account.address, key.permission_id).remaining == 10 * USDC
    prompts = s.passkey.sign_count

    shop_before, cafe_before = s.balance(SHOP), s.balance(CAFE)
    for to, amount in ((SHOP, 3 * USDC), (CAFE, 4 * USDC), (SHOP, 2 * USDC)):
        receipt = _spend(s, key, to, amount)
        assert receipt is not None and receipt.success
    assert s.passkey.sign_count == prompts  # no passkey prompt for any of them
    assert (s.balance(SHOP) - shop_before, s.balance(CAFE) - cafe_before) == (5 * USDC, 4 * USDC)
    left = sp.spendable(s.w3, s.account.address, key.permission_id)
    assert left.remaining == 1 * USDC
    # The start is taken from the wall clock (the bundler's), and chain time runs ahead of it
    # once another test advanced it: the spends fall in the period the chain is in.
    index = (_now(s.w3) - permission.start) // sp.WEEKLY
    assert left.period_ends_at == permission.start + (index + 1) * sp.WEEKLY
    spends = sp.permission_spends(s.w3, s.account.address, key.permission_id)
    assert [(x.to, x.amount, x.period_index, x.spent_in_period) for x in spends] == [
        (SHOP, 3 * USDC, index, 3 * USDC),
        (CAFE, 4 * USDC, index, 7 * USDC),
        (SHOP, 2 * USDC, index, 9 * USDC),
    ]

    # Over the remaining allowance: the bundler's simulation says so before anything is sent...
    with pytest.raises(BundlerError) as refused:
        key.build_spend(s.bundler, to=SHOP, amount=2 * USDC)
    assert sp.OVER_ALLOWANCE in decode_revert_reason(str(refused.value).split()[-1])
    # ... and sent anyway (gas given), the op's execution reverts with the reason: nothing moves.
    receipt = _spend(s, key, SHOP, 2 * USDC, gas=FIXED_GAS)
    assert receipt is not None and not receipt.success
    assert sp.OVER_ALLOWANCE in receipt.reason
    assert s.balance(SHOP) - shop_before == 5 * USDC
    assert sp.spendable(s.w3, s.account.address, key.permission_id).remaining == 1 * USDC


@pytest.mark.parametrize("version", VERSIONS)
def test_two_spends_at_once_over_the_cap_move_exactly_the_allowance(chain, version):
    s = _setup(chain, version)
    key = s.grant(allowance=10 * USDC)
    before = s.balance(SHOP)
    # Both priced and signed while the whole allowance is left, on two nonce keys so neither
    # waits for the other, and submitted before either is mined.
    lanes = [sp.nonce_key_for(key.permission_id, lane) for lane in (0, 1)]
    ops = [key.build_spend(s.bundler, to=SHOP, amount=6 * USDC, nonce_key=n) for n in lanes]
    hashes = [_send_signed(s, key, op) for op in ops]
    outcomes = receipts_or_none(s.bundler, hashes, timeout=30)
    assert sorted(r.success for r in outcomes if r is not None) in ([False, True], [True])
    failed = [r for r in outcomes if r is not None and not r.success]
    assert all(sp.OVER_ALLOWANCE in r.reason for r in failed)
    assert s.balance(SHOP) - before == 6 * USDC
    assert sp.spendable(s.w3, s.account.address, key.permission_id).remaining == 4 * USDC

    # The worst case, both in one bundle (validated together, then run): the same.
    ops = [key.build_spend(s.bundler, to=SHOP, amount=3 * USDC, nonce_key=n) for n in lanes]
    success = _hand_bundle(s, [key.sign(op)[0] for op in ops])
    assert success == [True, False]
    assert s.balance(SHOP) - before == 9 * USDC


def _hand_bundle(s: Setup, ops: list[dict]) -> list[bool]:
    """Ops put into one handleOps by a bundler EOA of our own; each op's success, with the
    failed ones' revert reasons checked to be readable."""
    eoa = s.w3.eth.account.from_key(DEV_KEYS[6])
    ep = s.account.entry_point_contract
    tx = ep.functions.handleOps([pack_v07(op) for op in ops], eoa.address).build_transaction(
        {
            "from": eoa.address,
            "nonce": s.w3.eth.get_transaction_count(eoa.address, "pending"),
            "gas": 2_000_000,
            "chainId": s.w3.eth.chain_id,
        }
    )
    receipt = s.w3.eth.wait_for_transaction_receipt(
        s.w3.eth.send_raw_transaction(eoa.sign_transaction(tx).raw_transaction)
    )
    assert receipt["status"] == 1
    events = ep.events.UserOperationEvent().process_receipt(receipt, errors=DISCARD)
    s.last_reverts = [
        decode_revert_reason("0x" + bytes(e["args"]["revertReason"]).hex())
        for e in ep.events.UserOperationRevertReason().process_receipt(receipt, errors=DISCARD)
    ]
    return [e["args"]["success"] for e in events]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_period_rollover_restores_the_allowance_exactly_once(chain, version):
    period = 300  # seconds of chain time; the spends before the jump take a few seconds
    s = _setup(chain, version)
    # A start whole periods back, so that the chain has just entered period k: the bundler
    # needs a start behind its wall clock, which the chain's time may have left behind.
    now = _now(s.w3)
    k = max(0, -(-(now - int(time.time()) + 4) // period))
    key = s.grant(allowance=5 * USDC, period=period, start=now - 1 - k * period)
    before = s.balance(SHOP)
    assert _spend(s, key, SHOP, 5 * USDC).success
    assert sp.spendable(s.w3, s.account.address, key.permission_id).remaining == 0
    assert not _spend(s, key, SHOP, 1, gas=FIXED_GAS).success

    _advance(s.w3, period)
    assert sp.spendable(s.w3, s.account.address, key.permission_id).remaining == 5 * USDC
    assert _spend(s, key, SHOP, 5 * USDC).success
    over = _spend(s, key, SHOP, 1, gas=FIXED_GAS)  # restored once, not twice
    assert not over.success and sp.OVER_ALLOWANCE in over.reason
    assert s.balance(SHOP) - before == 10 * USDC
    spends = sp.permission_spends(s.w3, s.account.address, key.permission_id)
    assert [(x.period_index, x.spent_in_period) for x in spends] == [
        (k, 5 * USDC),
        (k + 1, 5 * USDC),
    ]


_FAILED_OP = Web3.keccak(text="FailedOp(uint256,string)")[:4]


def _entry_point_refusal(s: Setup, op: dict) -> str:
    """Why the EntryPoint itself refuses `op` (handleOps run as an eth_call): FailedOp's reason."""
    eoa = s.w3.eth.account.from_key(DEV_KEYS[6])
    ep = s.account.entry_point_contract
    data = ep.encode_abi("handleOps", [[pack_v07(op)], eoa.address])
    answer = s.w3.provider.make_request(
        "eth_call", [{"from": eoa.address, "to": ep.address, "data": data}, "latest"]
    )
    error = answer.get("error") or {}
    revert = error.get("data")
    revert = revert.get("data") if isinstance(revert, dict) else revert
    raw = bytes.fromhex((revert or "0x")[2:])
    assert raw[:4] == _FAILED_OP, answer
    return decode(["uint256", "string"], raw[4:])[1]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_expired_permission_is_refused_by_the_entry_point(chain, version):
    s = _setup(chain, version)
    key = s.grant(allowance=5 * USDC, end=_now(s.w3) + 40)
    op = key.build_spend(s.bundler, to=SHOP, amount=1 * USDC)  # priced while active
    signed, op_hash = key.sign(op)
    _advance(s.w3, 60)  # mid-period: the period is a week
    assert sp.spendable(s.w3, s.account.address, key.permission_id) == sp.Spendable(0, 0)
    # The EntryPoint refuses it, whoever bundles it ...
    assert _entry_point_refusal(s, signed) == "AA22 expired or not due"
    # ... and so does the bundler: at once (by its own clock, or its simulation), or when it
    # simulates the bundle (when the chain's time runs ahead of its clock): never mined.
    before = s.balance(SHOP)
    try:
        s.bundler.send_user_operation(to_rpc(signed), key.entry_point)
    except BundlerError as exc:
        assert "AA22" in str(exc) or "expire" in str(exc), str(exc)
    else:
        assert receipt_or_none(s.bundler, op_hash, timeout=5) is None
    assert s.balance(SHOP) == before


@pytest.mark.parametrize("version", VERSIONS)
def test_revocation_ends_spends_and_a_racing_spend_either_runs_first_or_fails(chain, version):
    s = _setup(chain, version)
    key = s.grant(allowance=10 * USDC)
    before = s.balance(SHOP)
    assert _spend(s, key, SHOP, 1 * USDC).success

    # One bundle validates a spend and the revocation, then runs the revocation first: the
    # spend's execution finds no permission and moves nothing.
    spend = key.sign(key.build_spend(s.bundler, to=SHOP, amount=1 * USDC))[0]
    revoke, _ = s.owner_op(sp.revoke_call(s.account, permission_id=key.permission_id))
    assert _hand_bundle(s, [revoke, spend]) == [True, False]
    assert sp.NO_SUCH_PERMISSION in s.last_reverts[0]
    assert s.balance(SHOP) - before == 1 * USDC
    assert sp.read_permission(s.w3, s.account.address, key.permission_id) is None
    assert sp.spendable(s.w3, s.account.address, key.permission_id) == sp.Spendable(0, 0)
    assert not sp.is_recipient(s.w3, s.account.address, key.permission_id, SHOP)
    # Afterwards the bundler refuses the key's ops at validation.
    op = key.build_spend(s.bundler, to=SHOP, amount=1 * USDC, gas=FIXED_GAS)
    with pytest.raises(BundlerError, match="AA24"):
        _send_signed(s, key, op)
    # Revoked ids are never granted again; revoking twice says why.
    grant = sp.grant_call(
        s.account,
        permission_id=key.permission_id,
        session_key=sp.new_session_key()[0],
        token=s.usdc.address,
        allowance=1,
        period_seconds=sp.DAILY,
        start=0,
        end=2**40,
        any_recipient=True,
    )
    for call, reason in (
        (grant, "PasskeyAccount: permission id already used"),
        (sp.revoke_call(s.account, permission_id=key.permission_id), sp.NO_SUCH_PERMISSION),
    ):
        with pytest.raises(BundlerError) as refused:
            s.account.build(call, s.bundler)
        assert reason in decode_revert_reason(str(refused.value).split()[-1])

    # Through the bundler, a spend sent together with a revocation: it ran before the
    # revocation was mined (and moved its amount) or it failed (and moved nothing).
    key = s.grant(allowance=10 * USDC)
    before = s.balance(SHOP)
    spend_op = key.build_spend(s.bundler, to=SHOP, amount=2 * USDC)
    revoke, revoke_hash = s.owner_op(sp.revoke_call(s.account, permission_id=key.permission_id))
    s.bundler.send_user_operation(to_rpc(revoke), s.account.entry_point)
    try:
        spend_hash = _send_signed(s, key, spend_op)
    except BundlerError as exc:  # the revocation was mined first
        assert "AA24" in str(exc)
        spend_hash = None
    assert receipt_or_none(s.bundler, revoke_hash).success
    # Mined with or before the revocation (its receipt is there once the revocation's is), or
    # dropped by the bundler (no receipt ever): no long wait.
    spent = receipt_or_none(s.bundler, spend_hash, timeout=2) if spend_hash else None
    moved = 2 * USDC if spent is not None and spent.success else 0
    assert s.balance(SHOP) - before == moved
    assert sp.read_permission(s.w3, s.account.address, key.permission_id) is None


def _refused(
    s: Setup,
    key: sp.SessionKeyAccount,
    call_data: str,
    signature: str | None = None,
    *,
    nonce_key: int | None = None,
):
    """Submit an op with `call_data` signed by the session key (or carrying `signature`), on
    its permission's lane 7 unless `nonce_key` says otherwise: the bundler must refuse it at
    signature validation (AA24), never as a revert (AA23)."""
    if nonce_key is None:
        nonce_key = sp.nonce_key_for(key.permission_id, 7)
    op = key.build(call_data, s.bundler, gas=FIXED_GAS, nonce_key=nonce_key)
    if signature is None:
        op, _ = key.sign(op)
    else:
        op = {**op, "signature": signature}
    with pytest.raises(BundlerError) as refused:
        s.bundler.send_user_operation(to_rpc(op), key.entry_point)
    assert "AA24" in str(refused.value), str(refused.value)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_session_key_can_do_nothing_outside_its_permission(chain, version):
    s = _setup(chain, version)
    key = s.grant(allowance=10 * USDC)
    other = s.grant(allowance=10 * USDC, any_recipient=True, recipients=())
    pid = key.permission_id
    transfer = s.usdc.encode_abi("transfer", [SHOP, 1 * USDC])

    # A plain call of the account: execute(token.transfer), a new owner, a batch.
    _refused(s, key, s.account.execute(s.usdc.address, 0, Web3.to_bytes(hexstr=transfer)))
    _refused(s, key, s.account.add_owner_call(*SoftwarePasskey().public_xy))
    # A spend the permission allows, but on the owners' nonce key or another permission's.
    allowed = sp.spend_call_data(permission_id=pid, to=SHOP, amount=1)
    _refused(s, key, allowed, nonce_key=0)
    _refused(s, key, allowed, nonce_key=sp.nonce_key_for(other.permission_id))
    # A recipient not on the list.
    _refused(s, key, sp.spend_call_data(permission_id=pid, to=STRANGER, amount=1))
    # Another permission's id (its key is not this one), in the call or in the signature.
    other_call = sp.spend_call_data(permission_id=other.permission_id, to=SHOP, amount=1)
    _refused(s, key, other_call)
    borrowed = sp.SessionKeyAccount(
        s.w3, s.account.address, other.permission_id, key.private_key, version=version
    )
    _refused(s, borrowed, other_call)
    # The same permission id on another account: that account holds no such permission.
    t = _setup(chain, version)
    t.run_owner(t.account.execute(SHOP, 0))  # deployed, no permission
    stranger = sp.SessionKeyAccount(s.w3, t.account.address, pid, key.private_key, version=version)
    _refused(t, stranger, sp.spend_call_data(permission_id=pid, to=SHOP, amount=1))

    # Malformed permission signatures are refusals, never reverts in validation.
    spend = sp.spend_call_data(permission_id=pid, to=SHOP, amount=1)
    lane = sp.nonce_key_for(pid, 7)
    good = key.sign(key.build(spend, s.bundler, gas=FIXED_GAS, nonce_key=lane))[0]["signature"]
    raw = bytes.fromhex(good[2:])
    max_word = b"\xff" * 32
    for junk in (
        max_word,  # only the marker
        max_word + pid + (2**255).to_bytes(32, "big") + bytes(32),  # offset out of range
        raw[:96] + (2**200).to_bytes(32, "big") + raw[128:],  # length out of range
        raw[:-40],  # truncated
        "0x" + encode(["uint256", "bytes32", "bytes"], [2**256 - 1, pid, raw[-96:-32]]).hex(),
        sp.pack_permission_signature(pid, b"\x00" * 65),  # ecrecover fails
    ):
        signature = junk if isinstance(junk, str) else "0x" + junk.hex()
        _refused(s, key, spend, signature=signature)

    # ERC-1271 never accepts a permission signature, even a valid one over the hash.
    digest = b"\x42" * 32
    signature = sp.sign_with_session_key(digest, key.private_key, permission_id=pid)
    assert s.account.contract.functions.isValidSignature(digest, signature).call().hex() == (
        "ffffffff"
    )

    # Nothing moved, the permission is intact, and the session key still spends within it.
    assert sp.spendable(s.w3, s.account.address, pid).remaining == 10 * USDC
    assert _spend(s, key, SHOP, 1 * USDC).success


def test_a_spend_signed_for_one_chain_is_refused_on_the_other(chain, l2_chain):
    """The same passkey, account address, permission id and session key on both chains: a
    spend signed for one chain is refused on the other (the userOpHash binds the chain id)."""
    passkey = SoftwarePasskey()
    session_address, session_key = sp.new_session_key()
    pid = sp.permission_id()
    sides = []
    for local in (chain, l2_chain):
        s = _setup(local, "0.7", passkey)
        now = _now(s.w3)
        s.run_owner(
            sp.grant_call(
                s.account,
                permission_id=pid,
                session_key=session_address,
                token=s.usdc.address,
                allowance=5 * USDC,
                period_seconds=sp.DAILY,
                start=_started(s.w3),
                end=now + 86_400,
                recipients=[SHOP],
            )
        )
        key = sp.SessionKeyAccount(s.w3, s.account.address, pid, session_key, version="0.7")
        sides.append((s, key))
    (card, card_key), (l2, l2_key) = sides
    assert card.account.address == l2.account.address
    signed, _ = card_key.sign(card_key.build_spend(card.bundler, to=SHOP, amount=1 * USDC))
    before = l2.balance(SHOP)
    with pytest.raises(BundlerError, match="AA24"):
        l2.bundler.send_user_operation(to_rpc(signed), l2_key.entry_point)
    assert l2.balance(SHOP) == before
    # On its own chain the same op goes through.
    card.bundler.send_user_operation(to_rpc(signed), card_key.entry_point)
    assert receipt_or_none(card.bundler, card_key.op_hash(signed)).success


def test_the_account_refuses_a_malformed_grant_and_installs_nothing(chain):
    s = _setup(chain, "0.7")
    s.run_owner(s.account.execute(SHOP, 0))  # deployed, no permission
    contract = s.account.contract
    now = _now(s.w3)
    session, _key = sp.new_session_key()
    pid = sp.permission_id()
    good = [pid, session, s.usdc.address, 5, sp.DAILY, now - 60, now + 3_600, [SHOP], False]
    zero = "0x" + "00" * 20
    cases = {
        "PasskeyAccount: no session key": {1: zero},
        "PasskeyAccount: token is not a contract": {2: SHOP},
        "PasskeyAccount: zero allowance": {3: 0},
        "PasskeyAccount: zero period": {4: 0},
        "PasskeyAccount: end before start": {6: now - 60},
        "PasskeyAccount: end in the past": {5: now - 600, 6: now - 10},
        "PasskeyAccount: zero recipient": {7: [SHOP, zero]},
    }
    both = ("PasskeyAccount: recipients or any recipient, not both", {8: True})
    for reason, changes in [*cases.items(), both]:
        args = [changes.get(i, value) for i, value in enumerate(good)]
        data = bytes.fromhex(contract.encode_abi("grantPermission", args)[2:])
        with pytest.raises(BundlerError) as refused:
            s.account.build(s.account.execute(s.account.address, 0, data), s.bundler)
        assert reason in decode_revert_reason(str(refused.value).split()[-1]), reason
    assert not contract.functions.usedPermissionIds(pid).call()
    # Nobody but the account grants, and nobody but the EntryPoint spends.
    stranger = s.w3.eth.accounts[1]
    with pytest.raises(ContractLogicError, match="only the account itself"):
        contract.functions.grantPermission(*good).call({"from": stranger})
    with pytest.raises(ContractCustomError):  # OpenZeppelin's AccountUnauthorized(address)
        contract.functions.executePermitted(pid, SHOP, 1).call({"from": stranger})


# --- swaps under a permission that names the pair ---------------------------------------------

EURE = 10**18  # one EURe (18 decimals)


def _token(w3, symbol: str):
    return w3.eth.contract(
        address=contracts.demo_token_address(symbol),
        abi=contracts.build_artifact("DemoToken")["abi"],
    )


def _router(w3):
    return w3.eth.contract(
        address=contracts.swap_router_address(),
        abi=contracts.build_artifact("DemoSwapRouter")["abi"],
    )


def _swap_data(s: Setup, amount: int, *, to: str | None = None, min_out: int = 1) -> bytes:
    """DemoSwapRouter.swap(USDC → EURe), its output to `to` (by default the account)."""
    eure = contracts.demo_token_address("EURe")
    data = _router(s.w3).encode_abi(
        "swap", [s.usdc.address, eure, amount, min_out, to or s.account.address]
    )
    return Web3.to_bytes(hexstr=data)


def _swap(s: Setup, key: sp.SessionKeyAccount, amount: int, *, min_out: int, **kw):
    data = kw.pop("data", None) or _swap_data(s, amount)
    op = key.build_swap(
        s.bundler,
        router=kw.pop("router", _router(s.w3).address),
        amount_in=amount,
        data=data,
        min_out=min_out,
        **kw,
    )
    return receipt_or_none(s.bundler, _send_signed(s, key, op))


def _swap_grant(s: Setup, **kw) -> sp.SessionKeyAccount:
    return s.grant(
        to_token=contracts.demo_token_address("EURe"), routers=[_router(s.w3).address], **kw
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_permission_that_names_a_pair_swaps_within_the_allowance_without_the_passkey(
    chain, version
):
    s = _setup(chain, version)
    eure, router = _token(s.w3, "EURe"), _router(s.w3)
    key = _swap_grant(s, allowance=10 * USDC)
    pid = key.permission_id
    assert sp.swap_to(s.w3, s.account.address, pid) == eure.address
    assert sp.is_router(s.w3, s.account.address, pid, router.address)
    assert not sp.is_recipient(s.w3, s.account.address, pid, router.address)
    prompts = s.passkey.sign_count
    usdc_before = s.balance(s.account.address)
    eure_before = eure.functions.balanceOf(s.account.address).call()

    expected = router.functions.quote(s.usdc.address, eure.address, 4 * USDC).call()
    receipt = _swap(s, key, 4 * USDC, min_out=expected)
    assert receipt is not None and receipt.success, receipt
    assert s.passkey.sign_count == prompts
    assert s.balance(s.account.address) == usdc_before - 4 * USDC
    assert eure.functions.balanceOf(s.account.address).call() - eure_before == expected
    assert expected == 4 * 92 * EURE // 100
    # Nothing is left approved to the router.
    assert s.usdc.functions.allowance(s.account.address, router.address).call() == 0
    [swap] = sp.permission_swaps(s.w3, s.account.address, pid)
    assert (swap.router, swap.to_token, swap.amount_in, swap.amount_out) == (
        router.address,
        eure.address,
        4 * USDC,
        expected,
    )
    # Transfers and swaps share the allowance, and the spend history.
    assert _spend(s, key, SHOP, 5 * USDC).success
    assert sp.spendable(s.w3, s.account.address, pid).remaining == 1 * USDC
    assert [(x.to, x.amount) for x in sp.permission_spends(s.w3, s.account.address, pid)] == [
        (router.address, 4 * USDC),
        (SHOP, 5 * USDC),
    ]
    # Over it: refused at the estimate with the reason, and reverted when sent anyway.
    with pytest.raises(BundlerError) as refused:
        key.build_swap(
            s.bundler,
            router=router.address,
            amount_in=2 * USDC,
            data=_swap_data(s, 2 * USDC),
            min_out=1,
        )
    assert sp.OVER_ALLOWANCE in decode_revert_reason(str(refused.value).split()[-1])
    over = _swap(s, key, 2 * USDC, min_out=1, gas=FIXED_GAS)
    assert over is not None and not over.success and sp.OVER_ALLOWANCE in over.reason
    assert s.balance(s.account.address) == usdc_before - 9 * USDC


@pytest.mark.parametrize("version", VERSIONS)
def test_a_swap_cannot_send_its_output_elsewhere_nor_use_another_router(chain, version):
    s = _setup(chain, version)
    eure, router = _token(s.w3, "EURe"), _router(s.w3)
    key = _swap_grant(s, allowance=10 * USDC)
    pid = key.permission_id
    usdc_before = s.balance(s.account.address)
    stranger_before = eure.functions.balanceOf(STRANGER).call()

    # The router call names another recipient: the router pays out, then the account's
    # post-condition finds no output and reverts the whole op.
    elsewhere = _swap_data(s, 3 * USDC, to=STRANGER)
    receipt = _swap(s, key, 3 * USDC, min_out=1, data=elsewhere, gas=FIXED_GAS)
    assert receipt is not None and not receipt.success
    assert sp.SWAP_OUTPUT_NOT_RECEIVED in receipt.reason
    # A minimum above what the router gives: the same.
    too_much = _swap(s, key, 1 * USDC, min_out=EURE, gas=FIXED_GAS)
    assert too_much is not None and not too_much.success
    assert sp.SWAP_OUTPUT_NOT_RECEIVED in too_much.reason
    assert eure.functions.balanceOf(STRANGER).call() == stranger_before
    assert s.balance(s.account.address) == usdc_before
    assert sp.spendable(s.w3, s.account.address, pid).remaining == 10 * USDC

    # A router not on the permission's list (here the token itself, whose transferFrom the
    # approval would open), refused at validation.
    lane = sp.nonce_key_for(pid, 7)
    transfer = s.usdc.encode_abi("transfer", [STRANGER, 1 * USDC])
    _refused(
        s,
        key,
        sp.swap_call_data(
            permission_id=pid,
            router=s.usdc.address,
            amount_in=1 * USDC,
            data=transfer,
            min_out=1,
        ),
        nonce_key=lane,
    )
    # The session key calling the router itself, or paying it as a transfer recipient.
    _refused(s, key, s.account.execute(router.address, 0, _swap_data(s, 1 * USDC)))
    _refused(s, key, sp.spend_call_data(permission_id=pid, to=router.address, amount=1))
    # A permission that names no pair cannot swap at all.
    plain = s.grant(allowance=10 * USDC)
    _refused(
        s,
        plain,
        sp.swap_call_data(
            permission_id=plain.permission_id,
            router=router.address,
            amount_in=1 * USDC,
            data=_swap_data(s, 1 * USDC),
            min_out=1,
        ),
    )
    assert s.balance(s.account.address) == usdc_before

    # A permission that only swaps (no recipients): it swaps, and transfers nothing.
    swap_only = _swap_grant(s, allowance=2 * USDC, recipients=())
    _refused(
        s, swap_only, sp.spend_call_data(permission_id=swap_only.permission_id, to=SHOP, amount=1)
    )
    receipt = _swap(s, swap_only, 2 * USDC, min_out=1)
    assert receipt is not None and receipt.success
    assert s.balance(s.account.address) == usdc_before - 2 * USDC


@pytest.mark.parametrize("version", VERSIONS)
def test_a_pair_names_a_contract_router_that_is_not_a_token(chain, version):
    s = _setup(chain, version)
    eure = contracts.demo_token_address("EURe")
    for to_token, routers, reason in (
        (s.usdc.address, [_router(s.w3).address], "PasskeyAccount: bad pair"),
        (eure, [eure], "PasskeyAccount: bad router"),
        (eure, [STRANGER], "PasskeyAccount: bad router"),  # no code
    ):
        call = sp.grant_call(
            s.account,
            permission_id=sp.permission_id(),
            session_key=sp.new_session_key()[0],
            token=s.usdc.address,
            allowance=1,
            period_seconds=sp.DAILY,
            start=0,
            end=2**40,
            any_recipient=True,
            to_token=to_token,
            routers=routers,
        )
        with pytest.raises(BundlerError) as refused:
            s.account.build(call, s.bundler)
        assert reason in decode_revert_reason(str(refused.value).split()[-1])


def test_the_account_fits_the_contract_size_limit(chain):
    s = _setup(chain, "0.7")
    s.grant(allowance=1)  # deploys it
    code = s.w3.eth.get_code(s.account.address)
    assert 0 < len(code) <= 24_576  # EIP-170, whatever the dev node allows
