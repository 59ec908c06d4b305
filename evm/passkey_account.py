"""The passkey-owned ERC-4337 account (our PasskeyAccount, from chain/contracts/, deployed by
its factory at a CREATE2 address over its first passkey): its address, initCode and calls, the
user operations the signing page builds, its owners and recovery, and the gas its real
verification costs beyond the bundler's estimate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from web3 import Web3

from evm.account import Erc4337Account
from evm.artifacts import build_artifact, passkey_factory_address
from evm.bundler import BundlerError
from evm.signature import dummy_signature, sign_as_owner

# What a real assertion costs in validateUserOp beyond the estimation stub, which names no live
# owner and so stops right after reading the owner's key: the batch check, base64url of the
# challenge compared, two SHA-256 and the P256VERIFY precompile (EIP-7951). Measured on the
# local stack (OpenZeppelin 5.7, osaka) with bench/owner_gas.py: 16,692 gas (12,708 for the
# stub, 29,400 for a real assertion), 17,237 for a batch of two op hashes, whatever the number
# of owners. About doubled for the EntryPoint's 63/64 forwarding and for longer clientDataJSON
# from other browsers; unused verification gas is not charged, so the margin costs the user
# nothing. A chain without P256VERIFY runs OpenZeppelin's Solidity verifier (hundreds of
# thousands of gas) and needs a measured budget of its own.
PASSKEY_VERIFICATION_GAS = 35_000

_OWNER_REMOVED_TOPIC = Web3.keccak(text="OwnerRemoved(uint256,bytes32,bytes32)")


class Authenticator(Protocol):
    """What signs an op's hash off the browser (chain.passkey_account.SoftwarePasskey)."""

    def get_assertion(self, challenge: bytes) -> dict[str, bytes]: ...


@dataclass(frozen=True)
class Owner:
    index: int
    qx: bytes
    qy: bytes


@dataclass(frozen=True)
class OwnerRemoval:
    """When an owner left the account, read from its OwnerRemoved event."""

    index: int
    qx: bytes
    qy: bytes
    block_number: int
    timestamp: int  # the block's, seconds since the epoch
    tx_hash: str


@dataclass(frozen=True)
class RecoveryState:
    key: str  # the recovery key's address
    delay: int  # seconds
    pending: tuple[bytes, bytes] | None  # (qx, qy) proposed, while a recovery waits
    ready_at: int | None  # chain time from which executeRecovery succeeds
    nonce: int  # the next proposal's nonce (evm.recovery.recovery_proposal_hash)


def is_signature_refusal(error: BundlerError) -> bool:
    """The EntryPoint refused the op's signature (AA24): a removed or wrong passkey, or an
    assertion over another challenge."""
    return "AA24" in str(error)


@dataclass
class PasskeyAccountClient(Erc4337Account):
    w3: Web3
    qx: bytes  # the first passkey's key: with salt, it fixes the address on every chain
    qy: bytes
    version: str = "0.7"
    salt: int = 0
    origin: str = "http://127.0.0.1:8000"
    # Ops signed as part of a batch carry the batch's hashes in their signature: the stub the
    # bundler estimates with must be as long, or preVerificationGas falls short.
    batch_size: int = 0

    def __post_init__(self) -> None:
        self._setup()
        self.factory = self.w3.eth.contract(
            address=passkey_factory_address(self.version),
            abi=build_artifact("PasskeyAccountFactory")["abi"],
        )
        self.account_abi = build_artifact("PasskeyAccount")["abi"]
        self.dummy_signature = dummy_signature(self.origin, batch_size=self.batch_size)

    @property
    def address(self) -> str:
        return self.factory.functions.getAddress(self.qx, self.qy, self.salt).call()

    @property
    def contract(self):
        return self.w3.eth.contract(address=self.address, abi=self.account_abi)

    def build(self, call_data, bundler, *, gas=None, nonce_key=0):
        op = super().build(call_data, bundler, gas=gas, nonce_key=nonce_key)
        if gas is None:  # the bundler's estimate ran the stub, not the real verification
            op["verificationGasLimit"] += PASSKEY_VERIFICATION_GAS
        return op

    def factory_data(self) -> str:
        return self.factory.encode_abi("createAccount", [self.qx, self.qy, self.salt])

    def execute_batch(self, calls: list[tuple[str, int, bytes]]) -> str:
        targets = [Web3.to_checksum_address(target) for target, _, _ in calls]
        return self.contract.encode_abi(
            "executeBatch",
            [targets, [value for _, value, _ in calls], [data for _, _, data in calls]],
        )

    # --- owner changes and recovery: the account calls itself from a user operation --------

    def _self_call(self, fn: str, args: list[Any]) -> str:
        data = self.contract.encode_abi(fn, args)
        return self.execute(self.address, 0, Web3.to_bytes(hexstr=data))

    def add_owner_call(self, qx: bytes, qy: bytes) -> str:
        return self._self_call("addOwner", [qx, qy])

    def remove_owner_call(self, index: int, qx: bytes, qy: bytes) -> str:
        """The key is named with the index: an op built from a stale owner list fails."""
        return self._self_call("removeOwnerAtIndex", [index, qx, qy])

    def set_recovery_call(self, key_address: str, delay: int) -> str:
        return self._self_call("setRecovery", [Web3.to_checksum_address(key_address), delay])

    def cancel_recovery_call(self) -> str:
        return self._self_call("cancelRecovery", [])

    # --- reads -----------------------------------------------------------------------------

    def owners(self) -> list[Owner]:
        """The live owners by index; before deployment, the first passkey as owner 0."""
        if not self.is_deployed():
            return [Owner(0, bytes(self.qx), bytes(self.qy))]
        account = self.contract
        owners = []
        for index in range(account.functions.nextOwnerIndex().call()):
            qx, qy = account.functions.ownerAt(index).call()
            if any(qx) or any(qy):
                owners.append(Owner(index, qx, qy))
        return owners

    def owner_index(self, qx: bytes, qy: bytes) -> int | None:
        """The index a passkey signs as on this chain (None: not a live owner here)."""
        return next(
            (o.index for o in self.owners() if (o.qx, o.qy) == (bytes(qx), bytes(qy))), None
        )

    def recovery_state(self) -> RecoveryState | None:
        """None when the account has no recovery key (or is not deployed)."""
        if not self.is_deployed():
            return None
        account = self.contract
        key, delay, pending_qx, pending_qy, ready_at = account.functions.recovery().call()
        if int(key, 16) == 0:
            return None
        pending = (pending_qx, pending_qy) if ready_at else None
        return RecoveryState(
            key=key,
            delay=delay,
            pending=pending,
            ready_at=ready_at or None,
            nonce=account.functions.recoveryNonce().call(),
        )

    def owner_removal(self, index: int) -> OwnerRemoval | None:
        """When owner `index` was removed (None: it was not)."""
        if not self.is_deployed():
            return None
        logs = self.w3.eth.get_logs(
            {
                "address": self.address,
                "fromBlock": 0,
                "toBlock": "latest",
                "topics": [_OWNER_REMOVED_TOPIC, "0x" + index.to_bytes(32, "big").hex()],
            }
        )
        if not logs:
            return None
        log = logs[-1]
        data = bytes(log["data"])
        block = self.w3.eth.get_block(log["blockNumber"])
        return OwnerRemoval(
            index=index,
            qx=data[:32],
            qy=data[32:64],
            block_number=log["blockNumber"],
            timestamp=block["timestamp"],
            tx_hash="0x" + bytes(log["transactionHash"]).hex(),
        )

    def removed_owner_refusal(
        self, error: BundlerError, *, owner_index: int
    ) -> OwnerRemoval | None:
        """If the bundler refused an op signed as `owner_index` because that owner was removed
        from the account, the removal (so the page can say "this passkey was removed from your
        account on …"); None for any other failure."""
        if not is_signature_refusal(error):
            return None
        return self.owner_removal(owner_index)

    # --- signing (tests and demo data; the browser signs on the signing page) ---------------

    def sign_with(
        self,
        passkey: Authenticator,
        op: dict[str, Any],
        op_hash: str,
        *,
        owner_index: int = 0,
        batch: Sequence[str] = (),
    ) -> dict[str, Any]:
        """`op` signed by `passkey` as owner `owner_index`: over its own hash, or (with `batch`,
        which must list `op_hash`) over the batch, one assertion for every op listed."""
        signature = sign_as_owner(passkey, op_hash, owner_index=owner_index, batch=batch)
        return {**op, "signature": signature}


def sign_batch(
    passkey: Authenticator,
    ops: Sequence[dict[str, Any]],
    op_hashes: Sequence[str],
    *,
    owner_index: int = 0,
) -> list[dict[str, Any]]:
    """One assertion (one passkey prompt) over `batch_challenge(op_hashes)`, packed into every
    op: the same owner change on each configured chain. Each userOpHash binds its chain id,
    EntryPoint and account, so the signature approves exactly the ops listed."""
    if len(ops) != len(op_hashes):
        raise ValueError("one op hash per op")
    signature = sign_as_owner(passkey, op_hashes[0], owner_index=owner_index, batch=op_hashes)
    return [{**op, "signature": signature} for op in ops]
