"""Time-locked recovery of a PasskeyAccount: a code the user keeps controls a recovery key that
can propose one thing, a new passkey owner, added only after the account's delay on chain and
cancellable by any owner until then.

The code is never stored: the key is derived from it with scrypt, salted by the account's
address (one code, one account; no precomputation across accounts), and only the key's
address goes on chain (`setRecovery`). The server relays the proposal and its execution
(`propose_recovery_tx`, `execute_recovery_tx`) with its relayer, like a module transaction: the
contract checks the recovery key's signature and the delay itself.
"""

from __future__ import annotations

import hashlib
import secrets

from eth_abi import encode
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils import keccak, to_bytes, to_checksum_address

# Crockford's base32: no I, L, O, U, so what is read aloud or typed back is unambiguous.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TYPO = str.maketrans({"O": "0", "I": "1", "L": "1"})
CODE_SYMBOLS = 25  # 125 bits
CODE_GROUP = 5

# scrypt cost: 64 MiB and about a fifth of a second a derivation. The code's 125 bits already
# defeat guessing (the key's address is public on chain, so guesses can be checked offline);
# the work factor is the margin if a code is ever shortened or partly leaked.
SCRYPT_N = 2**16
SCRYPT_R = 8
SCRYPT_P = 1
_SCRYPT_MAXMEM = 128 * 1024 * 1024

_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

_DOMAIN_TYPEHASH = keccak(
    text="EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)
_RECOVERY_TYPEHASH = keccak(text="RecoveryProposal(bytes32 qx,bytes32 qy,uint256 nonce)")
_NAME_HASH = keccak(text="PasskeyAccount")
_VERSION_HASH = keccak(text="1")


class InvalidRecoveryCode(ValueError):
    """Not a recovery code at all (wrong length or symbols). A well-formed wrong code is only
    found out by comparing its key's address with the account's (the caller gives both the
    same answer)."""


def new_recovery_code() -> str:
    """25 random base32 symbols (125 bits) in groups of five: XXXXX-XXXXX-XXXXX-XXXXX-XXXXX."""
    symbols = "".join(secrets.choice(_ALPHABET) for _ in range(CODE_SYMBOLS))
    return "-".join(symbols[i : i + CODE_GROUP] for i in range(0, CODE_SYMBOLS, CODE_GROUP))


def normalize_recovery_code(code: str) -> str:
    """Upper case, no separators, O/I/L read as 0/1; raises InvalidRecoveryCode."""
    cleaned = "".join(ch for ch in code.upper() if ch not in " -\t\n").translate(_TYPO)
    if len(cleaned) != CODE_SYMBOLS or any(ch not in _ALPHABET for ch in cleaned):
        raise InvalidRecoveryCode("a recovery code is 25 letters and digits")
    return cleaned


def recovery_key_from_code(code: str, account_address: str) -> LocalAccount:
    """The recovery key a code controls for one account (scrypt, slow on purpose)."""
    salt = b"picnic-recovery:" + to_bytes(hexstr=to_checksum_address(account_address))
    seed = hashlib.scrypt(
        normalize_recovery_code(code).encode(),
        salt=salt,
        n=SCRYPT_N,
        r=SCRYPT_R,
        p=SCRYPT_P,
        maxmem=_SCRYPT_MAXMEM,
        dklen=32,
    )
    # A seed outside the curve order (odds about 2^-128) is hashed again, deterministically.
    while not 0 < int.from_bytes(seed, "big") < _SECP256K1_N:
        seed = keccak(seed)
    return Account.from_key(seed)


def recovery_proposal_hash(
    *, chain_id: int, account: str, qx: bytes, qy: bytes, nonce: int
) -> bytes:
    """The EIP-712 hash the recovery key signs (PasskeyAccount.recoveryProposalHash): the domain
    binds the chain and the account, the nonce makes it single use."""
    domain = keccak(
        encode(
            ["bytes32", "bytes32", "bytes32", "uint256", "address"],
            [_DOMAIN_TYPEHASH, _NAME_HASH, _VERSION_HASH, chain_id, to_checksum_address(account)],
        )
    )
    struct = keccak(
        encode(["bytes32", "bytes32", "bytes32", "uint256"], [_RECOVERY_TYPEHASH, qx, qy, nonce])
    )
    return keccak(b"\x19\x01" + domain + struct)


def sign_recovery_proposal(
    key: LocalAccount, *, chain_id: int, account: str, qx: bytes, qy: bytes, nonce: int
) -> bytes:
    """The recovery key's 65-byte signature (r ‖ s ‖ v) over the proposal hash."""
    digest = recovery_proposal_hash(chain_id=chain_id, account=account, qx=qx, qy=qy, nonce=nonce)
    return bytes(key.unsafe_sign_hash(digest).signature)


def propose_recovery_tx(*, qx: bytes, qy: bytes, signature: bytes) -> bytes:
    """PasskeyAccount.proposeRecovery(qx, qy, signature) calldata, for the relayer (to: the
    account)."""
    return keccak(text="proposeRecovery(bytes32,bytes32,bytes)")[:4] + encode(
        ["bytes32", "bytes32", "bytes"], [qx, qy, signature]
    )


def execute_recovery_tx() -> bytes:
    """PasskeyAccount.executeRecovery() calldata, for the relayer (to: the account); reverts
    on chain before the delay has passed."""
    return keccak(text="executeRecovery()")[:4]
