"""Fixtures for the passkey, signing and action-tool tests."""

from __future__ import annotations

import json

import pytest
from web3 import Web3

from actions.accounts.models import SmartAccount
from actions.accounts.pages import _account_address
from actions.accounts.passkeys import passkey_register, registration_options
from actions.tests.factories import demo_asset_id
from chain.dev import fund, mint
from chain.passkey_account import SoftwarePasskey
from core.chains import card_chain, with_endpoints
from dev.demo.actions import ensure_demo_tokens

ORIGIN = "http://localhost:8000"


@pytest.fixture
def webauthn_settings(settings, chain_settings):
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.WEBAUTHN_ORIGIN = ORIGIN
    settings.PUBLIC_BASE_URL = ORIGIN
    ensure_demo_tokens()
    return settings


@pytest.fixture
def webauthn(settings):
    """The WebAuthn relying party of the software passkeys, no chain (webauthn_settings has)."""
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.WEBAUTHN_ORIGIN = ORIGIN
    return settings


@pytest.fixture
def make_user_registered(webauthn_settings, make_user):
    """A user with a registered software passkey and a funded, not yet deployed account."""

    def make(username: str, *, user=None):
        user = user or make_user(username)
        passkey = SoftwarePasskey(rp_id="localhost", origin=ORIGIN)
        _, challenge = registration_options(user=user)
        passkey_register(
            user=user,
            credential_json=json.dumps(passkey.create(challenge)),
            expected_challenge=challenge,
            account_address=_account_address,
        )
        # Registered on every chain; the card's chain's row is the one funded here.
        account = SmartAccount.objects.get(
            user=user, passkey__isnull=False, chain_id=card_chain().id
        )
        w3 = Web3(Web3.HTTPProvider(card_chain().rpc_url))
        fund(w3, account.address, Web3.to_wei(1, "ether"))
        mint(w3, "USDC", account.address, 10_000_000)
        return user, passkey, account, w3

    return make


@pytest.fixture
def registered(make_user_registered, user):
    _, passkey, account, w3 = make_user_registered(user.username, user=user)
    return passkey, account, w3


@pytest.fixture
def own_l2(settings, tmp_path):
    """A second chain (31338) of the test's own, node and bundler, with settings.CHAINS
    pointed at it: a test may stop it (and start it again on the same ports)."""
    from chain.stack import LocalChain, free_port

    l2 = LocalChain(
        rpc_port=free_port(),
        bundler_port=free_port(),
        workdir=tmp_path,
        chain_id=31338,
        card_contracts=False,
    )
    l2.start()
    try:
        settings.CHAINS = with_endpoints(31338, rpc_url=l2.rpc_url, bundler_url=l2.bundler_url)
        yield l2
    finally:
        l2.stop()


@pytest.fixture
def gnosis_pay(settings, chain_settings):
    """A local server speaking the Gnosis Pay API, verifying SIWE on the local chain."""
    from dev.providers.local_gnosis_pay import LocalGnosisPayServer

    with LocalGnosisPayServer(rpc_url=chain_settings.rpc_url) as server:
        settings.GNOSIS_PAY_URL = server.url
        settings.GNOSIS_PAY_TIMEOUT_SECONDS = 1.0
        yield server


@pytest.fixture
def quotes(settings):
    """A local server speaking LI.FI's quote API, routing through the dev chain's DEX."""
    from dev.providers.local_lifi import LocalLifiServer

    with LocalLifiServer() as server:
        settings.SWAP_QUOTE_URL = server.url
        settings.SWAP_QUOTE_TIMEOUT_SECONDS = 1.0
        yield server


@pytest.fixture
def write_token(user, application, make_token):
    return make_token(user, application, scope="read:actions write:actions")


def usdc_id() -> str:
    return demo_asset_id(31337, "USDC")


def nonce_word(n: int) -> str:
    """An eth_call answer: one uint256 word (the EntryPoint's getNonce)."""
    return "0x" + n.to_bytes(32, "big").hex()


@pytest.fixture
def rpc(settings):
    """A scripted bundler and chain: the op is nowhere, its nonce (0) is not used yet."""
    from dev.testing import ScriptedServer

    with ScriptedServer() as server:
        settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url=server.url)
        settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, rpc_url=server.url)
        # Short, for the hang cases, but not so short that a busy CI host (a pause of this
        # process, which serves the script too) reads as a hang: one failed a run at 0.5 s.
        settings.BUNDLER_TIMEOUT_SECONDS = 2.0
        server.results.update(
            {
                "eth_getUserOperationReceipt": None,
                "eth_getUserOperationByHash": None,
                "eth_call": nonce_word(0),
            }
        )
        yield server
