"""What the tests of the Safe and the Zodiac modifiers share: a deployed passkey account and
its passkey's signature in the form the account checks on chain."""

from __future__ import annotations

from chain.passkey_account import SoftwarePasskey
from evm.passkey_account import PasskeyAccountClient
from evm.signature import pack_assertion


def packed_signature(passkey: SoftwarePasskey, challenge: bytes) -> bytes:
    """The passkey's assertion over `challenge`, packed as the account's isValidSignature
    reads it."""
    a = passkey.get_assertion(challenge)
    return bytes.fromhex(
        pack_assertion(
            authenticator_data=a["authenticator_data"],
            client_data_json=a["client_data_json"],
            signature_der=a["signature"],
        )[2:]
    )


def deploy_passkey_account(w3, passkey: SoftwarePasskey, *, sender: str) -> PasskeyAccountClient:
    """The passkey's account, deployed through its factory (salt 0) by `sender`."""
    account = PasskeyAccountClient(w3, *passkey.public_xy)
    w3.eth.wait_for_transaction_receipt(
        account.factory.functions.createAccount(account.qx, account.qy, 0).transact(
            {"from": sender}
        )
    )
    return account
