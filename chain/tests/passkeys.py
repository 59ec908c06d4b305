"""What the tests of the Safe and the Zodiac modifiers share: a deployed passkey account."""

from __future__ import annotations

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
