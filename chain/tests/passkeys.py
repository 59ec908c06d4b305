"""What the chain tests share: a deployed passkey account (the Safe and Zodiac tests) and the
wait for a user operation's receipt. Polled here, not with dev.testing.wait_until: chain/
imports no app (test_boundary)."""

from __future__ import annotations

import time

from chain.passkey_account import SoftwarePasskey
from evm.passkey_account import PasskeyAccountClient


def deploy_passkey_account(w3, passkey: SoftwarePasskey, *, sender: str) -> PasskeyAccountClient:
    """The passkey's account, deployed through its factory (salt 0) by `sender`."""
    account = PasskeyAccountClient(w3, *passkey.public_xy)
    w3.eth.wait_for_transaction_receipt(
        account.factory.functions.createAccount(account.qx, account.qy, 0).transact(
            {"from": sender}
        )
    )
    return account


def receipts_or_none(
    bundler, op_hashes: list[str], *, timeout: float = 20, after_first: float = 3
) -> list:
    """Each op's receipt, or None if the bundler dropped it, polled together: once one has its
    receipt the others get `after_first` seconds more (an op of the next bundle is mined within
    a block or two; one still without a receipt then was dropped), not the whole `timeout`."""
    found: dict[str, object] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(found) < len(op_hashes):
        for op_hash in op_hashes:
            if op_hash not in found and (receipt := bundler.get_user_operation_receipt(op_hash)):
                found[op_hash] = receipt
                deadline = min(deadline, time.monotonic() + after_first)
        time.sleep(0.2)
    return [found.get(op_hash) for op_hash in op_hashes]


def receipt_or_none(bundler, op_hash: str, *, timeout: float = 30):
    """The op's receipt, or None if the bundler dropped it (its validation failed later)."""
    return receipts_or_none(bundler, [op_hash], timeout=timeout)[0]
