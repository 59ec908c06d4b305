"""Properties of PasskeyAccount and SpendPermissions that hold for any sequence of calls
(Hypothesis stateful tests on the real local chain, derandomized and bounded):

- owners never drop to zero;
- nothing executes a recovery before its ready time;
- spending never exceeds a permission's allowance in a period;
- a revoked permission spends nothing;
- a session key can have nothing validated but `executePermitted` (for its own permission).

Each machine deploys a fresh account whose EntryPoint is an address the test impersonates, so
it can call the account as the EntryPoint (validateUserOp, executePermitted) and as itself
(an owner's op reaches the account as execute(self, 0, data); the passkey signature is covered
by test_passkey_account.py). Every transaction's block time is set by the test, so the model
knows the exact time each call runs at; the chain's answer must be the model's every time.
"""

from __future__ import annotations

import secrets

import pytest
from eth_account import Account
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from web3 import Web3
from web3.exceptions import ContractLogicError, Web3RPCError

from chain import contracts
from chain.dev import mint
from chain.passkey_account import SoftwarePasskey
from evm import spend_permission as sp

pytestmark = pytest.mark.chain

SHOP = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
STRANGER = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"
SIG_FAILED = 1
LOW_160 = (1 << 160) - 1
# Bounded for CI: about 30-60 s for both machines on the local node.
PROPERTY_SETTINGS = settings(
    max_examples=10,
    stateful_step_count=20,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
KEYS = [SoftwarePasskey().public_xy for _ in range(4)]  # P-256 public keys, by index


class Harness:
    """The local node, driven with explicit block times: `clock` is the next call's time."""

    def __init__(self, rpc_url: str):
        self.w3 = Web3(Web3.HTTPProvider(rpc_url))
        self.artifact = contracts.build_artifact("PasskeyAccount")

    def impersonate(self, address: str) -> str:
        address = Web3.to_checksum_address(address)
        self.w3.provider.make_request("hardhat_impersonateAccount", [address])
        self.w3.provider.make_request("hardhat_setBalance", [address, hex(10**21)])
        return address

    def new_account(self):
        """A fresh PasskeyAccount owned by KEYS[0], its EntryPoint an impersonated address."""
        self.entry_point = self.impersonate(Account.create().address)
        self.relayer = self.impersonate(Account.create().address)
        factory = self.w3.eth.contract(abi=self.artifact["abi"], bytecode=self.artifact["bytecode"])
        tx = factory.constructor(self.entry_point, *KEYS[0]).transact({"from": self.relayer})
        address = self.w3.eth.wait_for_transaction_receipt(tx).contractAddress
        self.account = self.w3.eth.contract(address=address, abi=self.artifact["abi"])
        self.impersonate(address)
        self.clock = self.w3.eth.get_block("latest")["timestamp"] + 1
        return self.account

    def transact(self, sender: str, fn) -> dict | None:
        """Mine `fn` from `sender` at `clock` (then one second later for the next); the
        receipt, or None if it reverted."""
        answer = self.w3.provider.make_request("evm_setNextBlockTimestamp", [self.clock])
        assert "error" not in answer, answer  # the model's time is the block's
        self.clock += 1
        try:
            tx = fn.transact({"from": sender, "gas": 3_000_000})
        except (ContractLogicError, Web3RPCError):
            # The node answers a reverted transaction with an error, mined or not: the next
            # call's time must come after this one's either way.
            if self.w3.eth.get_block("latest")["timestamp"] < self.clock - 1:
                self.w3.provider.make_request("evm_mine", [])
            return None
        receipt = self.w3.eth.wait_for_transaction_receipt(tx)
        return receipt if receipt.status == 1 else None

    def as_self(self, fn) -> dict | None:
        """What an owner-signed op's execute(self, 0, data) does: the account calls itself."""
        return self.transact(self.account.address, fn)

    def block_time(self, receipt) -> int:
        return self.w3.eth.get_block(receipt.blockNumber)["timestamp"]


class RawCall:
    """Calldata already encoded, sent as a contract function would be."""

    def __init__(self, w3: Web3, address: str, data: bytes):
        self.w3, self.address, self.data = w3, address, data

    def transact(self, tx: dict):
        return self.w3.eth.send_transaction({**tx, "to": self.address, "data": self.data})


@pytest.fixture(scope="module")
def harness(chain) -> Harness:
    return Harness(chain.rpc_url)


# --- owners and recovery -------------------------------------------------------------------


class OwnersAndRecovery(RuleBasedStateMachine):
    harness: Harness

    def __init__(self):
        super().__init__()
        self.h = self.harness
        self.account = self.h.new_account()
        self.owners = {0: 0}  # owner index → index into KEYS
        self.next_index = 1
        self.recovery_key = None
        self.delay = 0
        self.pending = None  # (KEYS index, ready_at)
        self.nonce = 0
        self.set_recovery(on=True, delay=60)  # as the app sets it up (sequences may undo it)

    @rule(key=st.integers(0, len(KEYS) - 1))
    def add_owner(self, key):
        ok = self.h.as_self(self.account.functions.addOwner(*KEYS[key])) is not None
        assert ok == (key not in self.owners.values())
        if ok:
            self.owners[self.next_index] = key
            self.next_index += 1

    @rule(index=st.integers(0, 6), key=st.integers(0, len(KEYS) - 1))
    def remove_owner(self, index, key):
        ok = self.h.as_self(self.account.functions.removeOwnerAtIndex(index, *KEYS[key]))
        expected = self.owners.get(index) == key and len(self.owners) > 1
        assert (ok is not None) == expected
        if ok:
            del self.owners[index]

    @rule(on=st.booleans(), delay=st.sampled_from([0, 1, 60, 3600]))
    def set_recovery(self, on, delay):
        key = Account.create() if on else None
        address = key.address if key else "0x" + "00" * 20
        assert self.h.as_self(self.account.functions.setRecovery(address, delay)) is not None
        self.recovery_key, self.delay, self.pending = key, delay, None

    @rule(key=st.integers(0, len(KEYS) - 1), by_recovery_key=st.sampled_from([True, True, False]))
    def propose_recovery(self, key, by_recovery_key):
        signer = self.recovery_key if by_recovery_key and self.recovery_key else Account.create()
        digest = self.account.functions.recoveryProposalHash(*KEYS[key], self.nonce).call()
        signature = bytes(signer.unsafe_sign_hash(digest).signature)
        receipt = self.h.transact(
            self.h.relayer, self.account.functions.proposeRecovery(*KEYS[key], signature)
        )
        expected = (
            self.recovery_key is not None and signer is self.recovery_key and self.pending is None
        )
        assert (receipt is not None) == expected
        if receipt:
            self.nonce += 1
            self.pending = (key, self.h.block_time(receipt) + self.delay)
            assert self.account.functions.recovery().call()[4] == self.pending[1]

    @rule()
    def cancel_recovery(self):
        ok = self.h.as_self(self.account.functions.cancelRecovery()) is not None
        assert ok == (self.pending is not None)
        self.pending = None

    @rule(near_ready=st.sampled_from([None, -2, -1, 0, 1]))
    def execute_recovery(self, near_ready):
        """Anyone relays executeRecovery: at the current time, or (with a proposal pending)
        `near_ready` seconds from its ready time, the lock's edge."""
        if near_ready is not None and self.pending is not None:
            self.h.clock = max(self.h.clock, self.pending[1] + near_ready)
        at = self.h.clock
        receipt = self.h.transact(self.h.relayer, self.account.functions.executeRecovery())
        if receipt:
            # The property: executed only with a proposal pending, at or after its ready time.
            assert self.pending is not None and self.h.block_time(receipt) >= self.pending[1]
        assert (receipt is not None) == (self.pending is not None and at >= self.pending[1])
        if receipt:
            key = self.pending[0]
            if key not in self.owners.values():
                self.owners[self.next_index] = key
                self.next_index += 1
            self.pending = None

    @rule(seconds=st.sampled_from([1, 58, 59, 60, 3598, 3599, 3600, 7200]))
    def wait(self, seconds):
        self.h.clock += seconds

    @invariant()
    def owners_never_drop_to_zero(self):
        count = self.account.functions.ownerCount().call()
        assert count >= 1
        assert count == len(self.owners)
        for index, key in self.owners.items():
            assert self.account.functions.ownerAt(index).call() == list(KEYS[key])
            assert self.account.functions.isOwner(*KEYS[key]).call()

    @invariant()
    def the_pending_recovery_is_the_models(self):
        _, _, qx, qy, ready_at = self.account.functions.recovery().call()
        if self.pending is None:
            assert ready_at == 0
        else:
            assert (qx, qy, ready_at) == (*KEYS[self.pending[0]], self.pending[1])


def test_owners_and_recovery_hold_for_any_sequence_of_calls(harness):
    OwnersAndRecovery.harness = harness
    run_state_machine_as_test(OwnersAndRecovery, settings=PROPERTY_SETTINGS)


# --- spend permissions ---------------------------------------------------------------------


class Permissions(RuleBasedStateMachine):
    harness: Harness

    def __init__(self):
        super().__init__()
        self.h = self.harness
        self.usdc = self.h.w3.eth.contract(
            address=contracts.demo_token_address("USDC"),
            abi=contracts.build_artifact("DemoToken")["abi"],
        )
        self.account = self.h.new_account()
        mint(self.h.w3, "USDC", self.account.address, 10**12)
        self.h.clock = self.h.w3.eth.get_block("latest")["timestamp"] + 1
        self.balance = self.usdc.functions.balanceOf(self.account.address).call()
        self.perms: dict[bytes, dict] = {}
        self.ids: list[bytes] = []

    def _perm(self, pick: int) -> tuple[bytes, dict | None]:
        if not self.ids or pick >= len(self.ids):
            return secrets.token_bytes(32), None  # never granted
        pid = self.ids[pick]
        return pid, self.perms[pid]

    @rule(
        allowance=st.integers(1, 1_000),
        period=st.sampled_from([60, 3600]),
        delay=st.sampled_from([0, 0, 90]),
        length=st.sampled_from([150, 7200]),
        any_recipient=st.booleans(),
    )
    def grant(self, allowance, period, delay, length, any_recipient):
        pid = secrets.token_bytes(32)
        session_address, session_key = sp.new_session_key()
        start = self.h.clock + delay
        data = sp.grant_data(
            permission_id=pid,
            session_key=session_address,
            token=self.usdc.address,
            allowance=allowance,
            period_seconds=period,
            start=start,
            end=start + length,
            recipients=[] if any_recipient else [SHOP],
            any_recipient=any_recipient,
        )
        assert self.h.as_self(RawCall(self.h.w3, self.account.address, data)) is not None
        self.ids.append(pid)
        self.perms[pid] = {
            "key": session_key,
            "allowance": allowance,
            "period": period,
            "start": start,
            "end": start + length,
            "any": any_recipient,
            "revoked": False,
            "spent": {},  # period index → spent in it
        }

    @rule(pick=st.integers(0, 4))
    def revoke(self, pick):
        pid, perm = self._perm(pick)
        ok = self.h.as_self(self.account.functions.revokePermission(pid)) is not None
        assert ok == (perm is not None and not perm["revoked"])
        if ok:
            perm["revoked"] = True

    @rule(
        pick=st.integers(0, 4), amount=st.integers(0, 1_200), to=st.sampled_from([SHOP, STRANGER])
    )
    def spend(self, pick, amount, to):
        pid, perm = self._perm(pick)
        at = self.h.clock
        before = self.usdc.functions.balanceOf(to).call()
        receipt = self.h.transact(
            self.h.entry_point, self.account.functions.executePermitted(pid, to, amount)
        )
        live = perm is not None and not perm["revoked"] and perm["start"] <= at < perm["end"]
        index = (at - perm["start"]) // perm["period"] if live else None
        spent = perm["spent"].get(index, 0) if live else 0
        if receipt:
            # The properties: only a live permission spends, within the period's allowance.
            assert live, "a revoked, unknown or out-of-window permission spent"
            assert spent + amount <= perm["allowance"], "spent over the period's allowance"
        expected = live and spent + amount <= perm["allowance"] and (perm["any"] or to == SHOP)
        assert (receipt is not None) == expected
        moved = self.usdc.functions.balanceOf(to).call() - before
        assert moved == (amount if receipt else 0)
        if receipt:
            perm["spent"][index] = perm["spent"].get(index, 0) + amount
            self.balance -= amount

    @rule(pick=st.integers(0, 3), extra=st.sampled_from([-1, 0, 1]), to=st.sampled_from([SHOP]))
    def spend_the_rest(self, pick, extra, to):
        """The allowance's edge: what is left in the period (as the model counts it), ±1."""
        _, perm = self._perm(pick)
        if perm is None or not perm["start"] <= self.h.clock < perm["end"]:
            return self.spend(pick, max(extra, 0), to)
        index = (self.h.clock - perm["start"]) // perm["period"]
        left = perm["allowance"] - perm["spent"].get(index, 0)
        self.spend(pick, max(left + extra, 0), to)

    @rule(pick=st.integers(0, 3), offset=st.sampled_from([-1, 0, 1]))
    def wait_for_a_period_edge(self, pick, offset):
        """The next call runs `offset` seconds from the next period's start (or the end's)."""
        _, perm = self._perm(pick)
        if perm is None:
            return
        elapsed = max(self.h.clock - perm["start"], 0)
        edge = perm["start"] + (elapsed // perm["period"] + 1) * perm["period"]
        self.h.clock = max(self.h.clock, min(edge, perm["end"]) + offset)

    @rule(
        pick=st.integers(0, 8),
        kind=st.sampled_from(
            [
                "spend",
                "spend-stranger",
                "spend-other-id",
                "spend-padded",
                "spend-owner-nonce",
                "swap",
                "execute",
                "execute-batch",
                "add-owner",
                "remove-owner",
                "set-recovery",
                "revoke",
                "grant",
                "module-tx",
                "raw",
            ]
        ),
        raw=st.binary(max_size=132),
        amount=st.integers(0, 10**9),
    )
    def session_key_op(self, pick, kind, raw, amount):
        pid, perm = self._perm(pick)
        key = perm["key"] if perm else secrets.token_bytes(32)
        fns = self.account.functions
        me = self.account.address
        nonce = sp.nonce_key_for(pid) << 64
        spend = sp.spend_call_data(permission_id=pid, to=SHOP, amount=amount)
        data = {
            "spend": spend,
            "spend-stranger": sp.spend_call_data(permission_id=pid, to=STRANGER, amount=amount),
            "spend-other-id": sp.spend_call_data(
                permission_id=secrets.token_bytes(32), to=SHOP, amount=amount
            ),
            "spend-padded": spend + "00" * 32,
            "spend-owner-nonce": spend,
            "swap": fns.executePermittedSwap(pid, SHOP, amount, b"", 1)._encode_transaction_data(),
            "execute": fns.execute(
                self.usdc.address,
                0,
                self.usdc.encode_abi("transfer", [STRANGER, amount]),
            )._encode_transaction_data(),
            "execute-batch": fns.executeBatch([me], [0], [b""])._encode_transaction_data(),
            "add-owner": fns.addOwner(*KEYS[1])._encode_transaction_data(),
            "remove-owner": fns.removeOwnerAtIndex(0, *KEYS[0])._encode_transaction_data(),
            "set-recovery": fns.setRecovery(STRANGER, 0)._encode_transaction_data(),
            "revoke": fns.revokePermission(pid)._encode_transaction_data(),
            "grant": "0x"
            + sp.grant_data(
                permission_id=secrets.token_bytes(32),
                session_key=STRANGER,
                token=self.usdc.address,
                allowance=10**9,
                period_seconds=60,
                start=0,
                end=2**40,
                any_recipient=True,
            ).hex(),
            "module-tx": fns.execModuleTx(me, b"", b"\x00" * 32, b"")._encode_transaction_data(),
            "raw": "0x" + raw.hex(),
        }[kind]
        if kind == "spend-owner-nonce":
            nonce = 0
        op_hash = secrets.token_bytes(32)
        op = (
            me,
            nonce,
            b"",
            Web3.to_bytes(hexstr=data),
            b"\x00" * 32,
            0,
            b"\x00" * 32,
            b"",
            Web3.to_bytes(hexstr=sp.sign_with_session_key(op_hash, key, permission_id=pid)),
        )
        validation = fns.validateUserOp(op, op_hash, 0).call({"from": self.h.entry_point})
        accepted = validation & LOW_160 == 0
        live = perm is not None and not perm["revoked"]
        expected = live and (kind == "spend" or (kind == "spend-stranger" and perm["any"]))
        assert accepted == expected, (kind, validation)
        if accepted:
            # The window goes back to the EntryPoint: validAfter = start, validUntil = end - 1.
            assert validation >> 208 == perm["start"]
            assert (validation >> 160) & ((1 << 48) - 1) == perm["end"] - 1
        # ERC-1271 never takes a session key's signature.
        assert fns.isValidSignature(op_hash, op[-1]).call() == b"\xff\xff\xff\xff"

    @rule(seconds=st.sampled_from([1, 29, 30, 59, 60, 61, 3599, 3600]))
    def wait(self, seconds):
        self.h.clock += seconds

    @invariant()
    def only_recorded_spends_left_the_account(self):
        assert self.usdc.functions.balanceOf(self.account.address).call() == self.balance

    @invariant()
    def no_period_over_its_allowance(self):
        for perm in self.perms.values():
            assert all(spent <= perm["allowance"] for spent in perm["spent"].values())

    @precondition(lambda self: self.ids)
    @invariant()
    def revoked_permissions_are_gone_on_chain(self):
        for pid, perm in self.perms.items():
            session_key = self.account.functions.permission(pid).call()[0]
            assert (int(session_key, 16) == 0) == perm["revoked"]


def test_spend_permissions_hold_for_any_sequence_of_calls(harness):
    Permissions.harness = harness
    run_state_machine_as_test(Permissions, settings=PROPERTY_SETTINGS)
