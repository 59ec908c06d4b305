"""Gas of a USDC transfer spent under a spend permission (a session key's secp256k1 signature,
checked against the permission, the allowance recorded on chain) against the same transfer
signed with the passkey (a WebAuthn P-256 assertion), on one local chain of its own (or the card's
chain of the running world $BENCH_LOCAL_WORLD names, see bench/common.py).

What is measured, for each kind of op:
- validation gas: what `validateUserOp` uses, called by the EntryPoint with cold storage as in a
  bundle (bench/owner_gas.py's meter: an eth_call with a state override, nothing sent);
- actual gas: the `actualGasUsed` the EntryPoint charged for the op, read from its receipt
  (validation, execution, the EntryPoint's overhead and the preVerificationGas the bundler asked
  for, which prices the signature's calldata). A permission's first spend also starts its own
  EntryPoint nonce key and its spend record (two storage slots from zero), so the first and a
  later spend are shown apart; the passkey's ops use the account's nonce key 0, already started.

    .venv/bin/python bench/permission_gas.py
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from web3 import Web3  # noqa: E402

from bench.common import machine  # noqa: E402
from bench.owner_gas import VERSION, calldata_gas, metered_chain, receipt_of  # noqa: E402
from chain import contracts  # noqa: E402
from chain.dev import fund, mint  # noqa: E402
from chain.passkey_account import SoftwarePasskey  # noqa: E402
from evm import spend_permission as sp  # noqa: E402
from evm.bundler import BundlerClient  # noqa: E402
from evm.passkey_account import PasskeyAccountClient  # noqa: E402
from evm.userops import to_rpc, user_op_hash  # noqa: E402

RECIPIENT = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
AMOUNT = 1_000_000  # 1 USDC


def _actual_gas(bundler: BundlerClient, op_hash: str) -> int:
    return int(receipt_of(bundler, op_hash).raw["actualGasUsed"], 16)


def _passkey_transfer(account, passkey, bundler, usdc) -> tuple[int, int]:
    """(actual gas, signature bytes) of a passkey-signed USDC transfer."""
    transfer = usdc.encode_abi("transfer", [RECIPIENT, AMOUNT])
    op = account.build(account.execute(usdc.address, 0, Web3.to_bytes(hexstr=transfer)), bundler)
    op_hash = user_op_hash(
        op, entry_point=account.entry_point, chain_id=account.w3.eth.chain_id, version=VERSION
    )
    signed = account.sign_with(passkey, op, op_hash)
    bundler.send_user_operation(to_rpc(signed), account.entry_point)
    return _actual_gas(bundler, op_hash), len(signed["signature"]) // 2 - 1


def main() -> None:
    print(machine())
    with metered_chain("permission-gas") as (_local, w3, bundler, meter):
        usdc = w3.eth.contract(
            address=contracts.demo_token_address("USDC"),
            abi=contracts.build_artifact("DemoToken")["abi"],
        )
        passkey = SoftwarePasskey()
        account = PasskeyAccountClient(w3, *passkey.public_xy, version=VERSION)
        fund(w3, account.address, Web3.to_wei(1, "ether"))
        mint(w3, "USDC", account.address, 100 * AMOUNT)
        mint(w3, "USDC", RECIPIENT, AMOUNT)  # a recipient that already holds some, both ways

        # The grant deploys the account: one passkey-signed op.
        session_address, session_key = sp.new_session_key()
        pid = sp.permission_id()
        now = w3.eth.get_block("latest")["timestamp"]
        grant = sp.grant_call(
            account,
            permission_id=pid,
            session_key=session_address,
            token=usdc.address,
            allowance=50 * AMOUNT,
            period_seconds=sp.WEEKLY,
            start=min(now, int(time.time())) - 60,
            end=now + 30 * 86_400,
            recipients=[RECIPIENT],
        )
        op = account.build(grant, bundler)
        op_hash = user_op_hash(
            op, entry_point=account.entry_point, chain_id=w3.eth.chain_id, version=VERSION
        )
        bundler.send_user_operation(
            to_rpc(account.sign_with(passkey, op, op_hash)), account.entry_point
        )
        grant_gas = _actual_gas(bundler, op_hash)
        session = sp.SessionKeyAccount(w3, account.address, pid, session_key, version=VERSION)

        # Validation alone, same op hash, cold storage.
        digest = secrets.token_bytes(32)
        transfer = usdc.encode_abi("transfer", [RECIPIENT, AMOUNT])
        passkey_call = account.execute(usdc.address, 0, Web3.to_bytes(hexstr=transfer))
        passkey_sig = "0x" + passkey.owner_signature(digest).hex()
        passkey_validation, valid = meter.validation_gas(
            account.address, passkey_sig, digest, call_data=passkey_call
        )
        assert valid == 0, "the passkey's signature was refused"
        spend_call = sp.spend_call_data(permission_id=pid, to=RECIPIENT, amount=AMOUNT)
        permission_sig = sp.sign_with_session_key(digest, session_key, permission_id=pid)
        permission_validation, valid = meter.validation_gas(
            account.address,
            permission_sig,
            digest,
            call_data=spend_call,
            nonce=sp.nonce_key_for(pid) << 64,  # the permission's own nonce key
        )
        assert valid & (2**160 - 1) == 0, "the session key's signature was refused"

        # Whole ops through the bundler.
        passkey_gas = [_passkey_transfer(account, passkey, bundler, usdc) for _ in range(2)]
        permission_gas = []
        for _ in range(2):
            op_hash = session.send_spend(bundler, to=RECIPIENT, amount=AMOUNT)
            permission_gas.append(_actual_gas(bundler, op_hash))
        assert sp.spendable(w3, account.address, pid).remaining == 48 * AMOUNT

        passkey_sig_bytes = passkey_gas[0][1]
        permission_sig_bytes = len(permission_sig) // 2 - 1
        print()
        print(f"{'op':<36}{'validation gas':>16}{'actual gas':>12}{'signature bytes':>17}")
        rows = [
            ("passkey-signed transfer", passkey_validation, passkey_gas[1][0], passkey_sig_bytes),
            ("permissioned transfer, first", permission_validation, permission_gas[0], None),
            ("permissioned transfer, later", permission_validation, permission_gas[1], None),
        ]
        for name, validation, actual, size in rows:
            size = permission_sig_bytes if size is None else size
            print(f"{name:<36}{validation:>16,}{actual:>12,}{size:>17}")
        print(f"{'grant (deploys the account)':<36}{'':>16}{grant_gas:>12,}")
        print()
        print(
            f"signature calldata: {calldata_gas(bytes.fromhex(passkey_sig[2:]))} gas (passkey) "
            f"vs {calldata_gas(bytes.fromhex(permission_sig[2:]))} gas (session key)"
        )
        print(
            f"permissioned/passkey transfer gas: {permission_gas[1] / passkey_gas[1][0]:.3f} "
            f"(later spends), {permission_gas[0] / passkey_gas[1][0]:.3f} (a permission's first); "
            f"validation {permission_validation / passkey_validation:.3f}"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
