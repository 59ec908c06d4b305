"""Spend permissions of the passkey account (chain/contracts/SpendPermissions.sol): what an
owner signs to grant or revoke one, the session key's user operations that spend under it, and
the reads (the permission, what is left this period, its spends).

A permission lets one session key (a secp256k1 key the server makes per grant) send up to
`allowance` of one ERC-20 token per period, between `start` and `end`, to listed recipients or
to anyone. The account checks everything on chain: the key signs user operations whose callData
is exactly `executePermitted(id, to, amount)`; its signature is
`abi.encode(type(uint256).max, bytes32 id, bytes ecdsaSignature)`, the ECDSA signature over the
userOpHash as an EIP-191 personal message ("\\x19Ethereum Signed Message:\\n32" ‖ userOpHash).
Validation gives the EntryPoint the window (validAfter = start, validUntil = end - 1); the
allowance is checked and recorded when the op executes, so ops over it revert there with
`OVER_ALLOWANCE` and move nothing.

A permission may also name a pair, token → `to_token`, and the routers to swap through
(`permitSwaps`, in the grant's own op): the key may then sign `executePermittedSwap(id, router,
amountIn, data, minOut)`, which spends amountIn from the same allowance and reverts unless the
account ends up with at least `minOut` more of `to_token` (so `data` cannot send the output
elsewhere). Same-chain only: a bridge's output cannot be checked on the source chain.

Periods are fixed lengths of chain time counted from `start`: "monthly" is 30 days on chain,
not a calendar month.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from eth_abi import decode, encode
from eth_abi.exceptions import DecodingError
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import is_hex_address, keccak, to_checksum_address
from web3 import Web3

from evm.account import DUMMY_SIGNATURE, Erc4337Account
from evm.artifacts import build_artifact
from evm.bundler import BundlerClient, BundlerError
from evm.userops import to_rpc, user_op_hash

DAILY = 86_400
WEEKLY = 604_800
MONTHLY = 2_592_000  # 30 days: periods are fixed lengths of chain time, not calendar months
PERIODS = {"daily": DAILY, "weekly": WEEKLY, "monthly": MONTHLY}

PERMISSION_SIGNATURE = 2**256 - 1  # the first word; an owner signature names an owner index
_SIGNATURE_TYPES = ["uint256", "bytes32", "bytes"]
_SPEND_SELECTOR = keccak(text="executePermitted(bytes32,address,uint256)")[:4]
_SWAP_SELECTOR = keccak(text="executePermittedSwap(bytes32,address,uint256,bytes,uint256)")[:4]
_MAX_UINT160 = 2**160 - 1
_MAX_UINT48 = 2**48 - 1

# Revert reasons of the account (the op's receipt carries them when its execution fails).
OVER_ALLOWANCE = "PasskeyAccount: over the period's allowance"
NO_SUCH_PERMISSION = "PasskeyAccount: no such permission"
PERMISSION_EXPIRED = "PasskeyAccount: permission expired"
RECIPIENT_NOT_ALLOWED = "PasskeyAccount: recipient not allowed"
ROUTER_NOT_ALLOWED = "PasskeyAccount: router not allowed"
SWAP_OUTPUT_NOT_RECEIVED = "PasskeyAccount: swap output not received"

# Validation with the estimation stub recovers a signer (ecrecover) and stops at the comparison
# with the session key; the real signature goes on to pack validAfter/validUntil. A margin for
# that and for the EntryPoint's 63/64 forwarding: unused verification gas is not charged.
PERMISSION_VERIFICATION_GAS = 10_000

_SPENT_TOPIC = Web3.keccak(text="PermissionSpent(bytes32,address,uint256,uint256,uint256)")
_SWAPPED_TOPIC = Web3.keccak(text="PermissionSwapped(bytes32,address,address,uint256,uint256)")


class InvalidGrant(ValueError):
    """A grant the account would refuse (or that makes no sense), said before anything is sent."""


class SelfCalling(Protocol):
    """What grant_call/revoke_call need of an account client (evm.passkey_account's)."""

    address: str
    w3: Web3

    def execute(self, target: str, value: int = 0, data: bytes = b"") -> str: ...

    def execute_batch(self, calls: list[tuple[str, int, bytes]]) -> str: ...


@dataclass(frozen=True)
class Permission:
    id: bytes
    session_key: str
    token: str
    allowance: int  # per period, in the token's smallest unit
    period: int  # seconds
    start: int  # chain time, seconds since the epoch: first second a spend is allowed
    end: int  # first second it is not
    any_recipient: bool


@dataclass(frozen=True)
class PermissionSwap:
    """One PermissionSwapped event (its amountIn is also a PermissionSpent, to the router)."""

    router: str
    to_token: str
    amount_in: int
    amount_out: int
    block_number: int
    tx_hash: str


@dataclass(frozen=True)
class Spendable:
    remaining: int  # what may still be spent now; 0 when the permission is not active
    period_ends_at: int  # when the allowance is restored (or the permission ends); 0: inactive


@dataclass(frozen=True)
class PermissionSpend:
    """One PermissionSpent event."""

    to: str
    amount: int
    period_index: int
    spent_in_period: int  # after this spend
    block_number: int
    tx_hash: str


def new_session_key() -> tuple[str, bytes]:
    """A fresh secp256k1 key for one grant: (address, 32-byte private key)."""
    key = secrets.token_bytes(32)
    return Account.from_key(key).address, key


def permission_id() -> bytes:
    """A fresh random 32-byte permission id (the account never grants an id twice)."""
    return secrets.token_bytes(32)


def _id(value: bytes | str) -> bytes:
    raw = bytes.fromhex(value[2:]) if isinstance(value, str) else bytes(value)
    if len(raw) != 32:
        raise InvalidGrant(f"a permission id is 32 bytes, not {len(raw)}")
    return raw


def _address(value: str, what: str) -> str:
    if not isinstance(value, str) or not is_hex_address(value) or int(value, 16) == 0:
        raise InvalidGrant(f"{what} must be a non-zero 20-byte 0x address, got {value!r}")
    return to_checksum_address(value)


def _account_abi() -> list:
    return build_artifact("PasskeyAccount")["abi"]


def grant_data(
    *,
    permission_id: bytes | str,
    session_key: str,
    token: str,
    allowance: int,
    period_seconds: int,
    start: int,
    end: int,
    recipients: Sequence[str] = (),
    any_recipient: bool = False,
    swaps: bool = False,
) -> bytes:
    """`grantPermission(...)` calldata, for the account to call on itself (alone with
    `grant_call`, or as one call of an executeBatch). Checks what can be checked off chain;
    the account checks the rest (the token has code, the end is after the block's time).
    `swaps`: the same op names a pair (permit_swaps_data), so no recipient at all is fine."""
    if not isinstance(allowance, int) or not 0 < allowance <= _MAX_UINT160:
        raise InvalidGrant("the allowance must be a positive integer below 2^160")
    if not isinstance(period_seconds, int) or not 0 < period_seconds <= _MAX_UINT48:
        raise InvalidGrant("the period must be a positive number of seconds")
    if not (0 <= start <= _MAX_UINT48 and 0 <= end <= _MAX_UINT48) or end <= start:
        raise InvalidGrant("the end must come after the start")
    if recipients and any_recipient:
        raise InvalidGrant("name recipients or allow any recipient, not both")
    if not recipients and not any_recipient and not swaps:
        raise InvalidGrant("name recipients or allow any recipient (or a pair to swap)")
    listed = [_address(r, "a recipient") for r in recipients]
    contract = Web3().eth.contract(abi=_account_abi())
    data = contract.encode_abi(
        "grantPermission",
        [
            _id(permission_id),
            _address(session_key, "the session key"),
            _address(token, "the token"),
            allowance,
            period_seconds,
            start,
            end,
            listed,
            bool(any_recipient),
        ],
    )
    return Web3.to_bytes(hexstr=data)


def permit_swaps_data(
    *, permission_id: bytes | str, to_token: str, routers: Sequence[str]
) -> bytes:
    """`permitSwaps(id, toToken, routers)` calldata: the permission may swap its token into
    `to_token` through `routers` (same chain). Called right after grantPermission."""
    if not routers:
        raise InvalidGrant("a swap permission names at least one router")
    contract = Web3().eth.contract(abi=_account_abi())
    data = contract.encode_abi(
        "permitSwaps",
        [
            _id(permission_id),
            _address(to_token, "the output token"),
            [_address(r, "a router") for r in routers],
        ],
    )
    return Web3.to_bytes(hexstr=data)


def revoke_data(*, permission_id: bytes | str) -> bytes:
    contract = Web3().eth.contract(abi=_account_abi())
    return Web3.to_bytes(hexstr=contract.encode_abi("revokePermission", [_id(permission_id)]))


def grant_call(
    account: SelfCalling,
    *,
    to_token: str | None = None,
    routers: Sequence[str] = (),
    **grant: Any,
) -> str:
    """An owner-signed op's callData that grants a permission: execute(self, 0, grantPermission),
    or with a pair (`to_token`, `routers`) a batch of grantPermission and permitSwaps. Other
    keyword arguments as `grant_data`."""
    data = grant_data(**grant, swaps=to_token is not None)
    if to_token is None:
        return account.execute(account.address, 0, data)
    swaps = permit_swaps_data(
        permission_id=grant["permission_id"], to_token=to_token, routers=routers
    )
    return account.execute_batch([(account.address, 0, data), (account.address, 0, swaps)])


def revoke_call(account: SelfCalling, *, permission_id: bytes | str) -> str:
    return account.execute(account.address, 0, revoke_data(permission_id=permission_id))


def spend_call_data(*, permission_id: bytes | str, to: str, amount: int) -> str:
    """The only callData a session key may sign: executePermitted(id, to, amount)."""
    if not isinstance(amount, int) or amount < 0 or amount >= 2**256:
        raise ValueError("the amount is a non-negative integer")
    body = encode(
        ["bytes32", "address", "uint256"],
        [_id(permission_id), _address(to, "the recipient"), amount],
    )
    return "0x" + (_SPEND_SELECTOR + body).hex()


def swap_call_data(
    *, permission_id: bytes | str, router: str, amount_in: int, data: bytes | str, min_out: int
) -> str:
    """executePermittedSwap(id, router, amountIn, data, minOut): `data` is the router call
    (e.g. DemoSwapRouter.swap with the account as recipient)."""
    if not isinstance(amount_in, int) or not 0 <= amount_in < 2**256:
        raise ValueError("the amount is a non-negative integer")
    if not isinstance(min_out, int) or not 0 < min_out < 2**256:
        raise ValueError("the minimum output is a positive integer")
    raw = Web3.to_bytes(hexstr=data) if isinstance(data, str) else bytes(data)
    body = encode(
        ["bytes32", "address", "uint256", "bytes", "uint256"],
        [_id(permission_id), _address(router, "the router"), amount_in, raw, min_out],
    )
    return "0x" + (_SWAP_SELECTOR + body).hex()


def pack_permission_signature(permission_id: bytes | str, ecdsa_signature: bytes) -> str:
    return (
        "0x"
        + encode(
            _SIGNATURE_TYPES, [PERMISSION_SIGNATURE, _id(permission_id), ecdsa_signature]
        ).hex()
    )


def sign_with_session_key(
    user_op_hash: str | bytes, private_key: bytes, *, permission_id: bytes | str
) -> str:
    """The op's signature under a permission: the session key's EIP-191 signature over the
    userOpHash, packed as abi.encode(type(uint256).max, id, signature)."""
    digest = bytes.fromhex(user_op_hash[2:]) if isinstance(user_op_hash, str) else user_op_hash
    if len(digest) != 32:
        raise ValueError("a userOpHash is 32 bytes")
    signed = Account.sign_message(encode_defunct(primitive=digest), private_key)
    return pack_permission_signature(permission_id, bytes(signed.signature))


def permission_signature_id(signature: str | bytes) -> bytes | None:
    """The permission id a permission signature names (None: not a permission signature)."""
    raw = bytes.fromhex(signature[2:]) if isinstance(signature, str) else bytes(signature)
    if len(raw) < 32 or int.from_bytes(raw[:32], "big") != PERMISSION_SIGNATURE:
        return None
    try:
        return decode(_SIGNATURE_TYPES, raw)[1]
    except (DecodingError, OverflowError, ValueError):
        return None


def dummy_permission_signature(permission_id: bytes | str) -> str:
    """Well-formed, as long as a real one, signed by nobody: for the bundler's gas estimate."""
    return pack_permission_signature(permission_id, bytes.fromhex(DUMMY_SIGNATURE[2:]))


def nonce_key_for(permission_id: bytes | str, lane: int = 0) -> int:
    """An EntryPoint nonce key of the permission's own: the id's first 20 bytes, then a 32-bit
    `lane`. The account accepts a session key's op only on such a key, so the key cannot use
    up the owners' nonces or another permission's. Spends on one lane queue behind each other
    (never behind the owners' ops); spends meant to run in parallel take different lanes."""
    if not 0 <= lane < 2**32:
        raise ValueError("a lane is a 32-bit number")
    return (int.from_bytes(_id(permission_id)[:20], "big") << 32) | lane


# --- reads ---------------------------------------------------------------------------------


def read_permission(w3: Web3, account: str, permission_id: bytes | str) -> Permission | None:
    """The permission as the account holds it (None: never granted, or revoked)."""
    contract = w3.eth.contract(address=to_checksum_address(account), abi=_account_abi())
    if not w3.eth.get_code(contract.address):
        return None
    pid = _id(permission_id)
    key, token, allowance, period, start, end, any_recipient = contract.functions.permission(
        pid
    ).call()
    if int(key, 16) == 0:
        return None
    return Permission(pid, key, token, allowance, period, start, end, any_recipient)


def is_recipient(w3: Web3, account: str, permission_id: bytes | str, recipient: str) -> bool:
    contract = w3.eth.contract(address=to_checksum_address(account), abi=_account_abi())
    return contract.functions.isRecipient(_id(permission_id), to_checksum_address(recipient)).call()


def swap_to(w3: Web3, account: str, permission_id: bytes | str) -> str | None:
    """The pair's output token of the permission (None: it may not swap, or does not exist)."""
    contract = w3.eth.contract(address=to_checksum_address(account), abi=_account_abi())
    if not w3.eth.get_code(contract.address):
        return None
    token = contract.functions.swapTo(_id(permission_id)).call()
    return None if int(token, 16) == 0 else to_checksum_address(token)


def is_router(w3: Web3, account: str, permission_id: bytes | str, router: str) -> bool:
    contract = w3.eth.contract(address=to_checksum_address(account), abi=_account_abi())
    return contract.functions.isRouter(_id(permission_id), to_checksum_address(router)).call()


def _permission_logs(w3: Web3, account: str, topic: str, permission_id, from_block: int):
    """The account's events of one kind for one permission (its id is the first topic)."""
    return w3.eth.get_logs(
        {
            "address": to_checksum_address(account),
            "fromBlock": from_block,
            "toBlock": "latest",
            "topics": [topic, "0x" + _id(permission_id).hex()],
        }
    )


def permission_swaps(
    w3: Web3, account: str, permission_id: bytes | str, *, from_block: int = 0
) -> list[PermissionSwap]:
    """The permission's swaps, oldest first, from its PermissionSwapped events."""
    logs = _permission_logs(w3, account, _SWAPPED_TOPIC, permission_id, from_block)
    swaps = []
    for log in logs:
        amount_in, amount_out = decode(["uint256"] * 2, bytes(log["data"]))
        swaps.append(
            PermissionSwap(
                router=to_checksum_address(bytes(log["topics"][2])[12:]),
                to_token=to_checksum_address(bytes(log["topics"][3])[12:]),
                amount_in=amount_in,
                amount_out=amount_out,
                block_number=log["blockNumber"],
                tx_hash="0x" + bytes(log["transactionHash"]).hex(),
            )
        )
    return swaps


def spendable(w3: Web3, account: str, permission_id: bytes | str) -> Spendable:
    """What may be spent now (at the latest block's time) and when that period ends."""
    contract = w3.eth.contract(address=to_checksum_address(account), abi=_account_abi())
    if not w3.eth.get_code(contract.address):
        return Spendable(0, 0)
    remaining, ends_at = contract.functions.spendable(_id(permission_id)).call()
    return Spendable(remaining, ends_at)


def permission_spends(
    w3: Web3, account: str, permission_id: bytes | str, *, from_block: int = 0
) -> list[PermissionSpend]:
    """The permission's spends, oldest first, from its PermissionSpent events."""
    logs = _permission_logs(w3, account, _SPENT_TOPIC, permission_id, from_block)
    spends = []
    for log in logs:
        amount, period_index, spent = decode(["uint256"] * 3, bytes(log["data"]))
        spends.append(
            PermissionSpend(
                to=to_checksum_address(bytes(log["topics"][2])[12:]),
                amount=amount,
                period_index=period_index,
                spent_in_period=spent,
                block_number=log["blockNumber"],
                tx_hash="0x" + bytes(log["transactionHash"]).hex(),
            )
        )
    return spends


# --- the session key's user operations --------------------------------------------------------


def is_validation_refusal(error: BundlerError) -> bool:
    """The bundler refused the op at validation: a key that is not the permission's, a call
    other than executePermitted for that permission, a revoked permission or a recipient not
    allowed (AA24), or outside the permission's window (AA22)."""
    text = str(error)
    return "AA24" in text or "AA22" in text


@dataclass
class SessionKeyAccount(Erc4337Account):
    """The passkey account as a session key sees it: ops that spend under one permission.
    The account must be deployed (a permission is granted by an op of the account itself)."""

    w3: Web3
    account_address: str
    permission_id: bytes
    private_key: bytes
    version: str = "0.7"

    def __post_init__(self) -> None:
        self._setup()
        self.permission_id = _id(self.permission_id)
        self.account_abi = _account_abi()
        self.factory = None
        self.dummy_signature = dummy_permission_signature(self.permission_id)

    @property
    def address(self) -> str:
        return to_checksum_address(self.account_address)

    def factory_data(self) -> str:
        raise RuntimeError("a session key cannot deploy the account")

    def build_spend(
        self,
        bundler: BundlerClient,
        *,
        to: str,
        amount: int,
        gas: dict[str, int] | None = None,
        nonce_key: int | None = None,
    ) -> dict[str, Any]:
        """An unsigned op that spends `amount` to `to`, on `nonce_key` (by default the
        permission's lane 0, `nonce_key_for`). Without `gas` the bundler estimates it, which
        simulates the transfer: a spend over the allowance is refused there already
        (BundlerError naming OVER_ALLOWANCE)."""
        if not self.is_deployed():
            raise RuntimeError("the account is not deployed: no permission can exist yet")
        call = spend_call_data(permission_id=self.permission_id, to=to, amount=amount)
        key = nonce_key_for(self.permission_id) if nonce_key is None else nonce_key
        op = self.build(call, bundler, gas=gas, nonce_key=key)
        if gas is None:
            op["verificationGasLimit"] += PERMISSION_VERIFICATION_GAS
        return op

    def build_swap(
        self,
        bundler: BundlerClient,
        *,
        router: str,
        amount_in: int,
        data: bytes | str,
        min_out: int,
        gas: dict[str, int] | None = None,
        nonce_key: int | None = None,
    ) -> dict[str, Any]:
        """An unsigned op that swaps `amount_in` through `router` with the router call `data`,
        requiring `min_out` of the pair's token back (estimated like `build_spend`)."""
        if not self.is_deployed():
            raise RuntimeError("the account is not deployed: no permission can exist yet")
        call = swap_call_data(
            permission_id=self.permission_id,
            router=router,
            amount_in=amount_in,
            data=data,
            min_out=min_out,
        )
        key = nonce_key_for(self.permission_id) if nonce_key is None else nonce_key
        op = self.build(call, bundler, gas=gas, nonce_key=key)
        if gas is None:
            op["verificationGasLimit"] += PERMISSION_VERIFICATION_GAS
        return op

    def op_hash(self, op: dict[str, Any]) -> str:
        return user_op_hash(
            op, entry_point=self.entry_point, chain_id=self.w3.eth.chain_id, version=self.version
        )

    def sign(self, op: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """(the signed op, its userOpHash)."""
        op_hash = self.op_hash(op)
        signature = sign_with_session_key(
            op_hash, self.private_key, permission_id=self.permission_id
        )
        return {**op, "signature": signature}, op_hash

    def send_spend(
        self,
        bundler: BundlerClient,
        *,
        to: str,
        amount: int,
        gas: dict[str, int] | None = None,
        nonce_key: int | None = None,
    ) -> str:
        """Build, sign with the session key and submit; returns the userOpHash (the transfer
        happens when the bundler includes it: poll its receipt)."""
        op = self.build_spend(bundler, to=to, amount=amount, gas=gas, nonce_key=nonce_key)
        signed, op_hash = self.sign(op)
        bundler.send_user_operation(to_rpc(signed), self.entry_point)
        return op_hash
