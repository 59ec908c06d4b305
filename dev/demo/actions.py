"""Demo data for `manage.py seed_demo`: a smart account and actions in different states.

The on-chain ones are real: user operations built, signed and sent through the local bundler.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.conf import settings
from eth_utils import keccak
from web3 import Web3

from actions.accounts.models import SmartAccount, SmartAccountKind, Token
from actions.accounts.passkeys import smart_accounts_cover_chains
from actions.card.models import Card
from actions.evm_clients import bundler_client
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionType
from actions.execution.services import (
    action_create,
    action_expire_if_overdue,
    action_reconcile,
    action_submit,
)
from actions.ramps.models import RAMP_PROVIDER_FOR, RampAccount, RampCurrency
from actions.tool_requests.checks import passkey_client
from chain import contracts, ens, zodiac
from chain.dev import fund, mint
from chain.safe import DelayConfig, deploy_safe
from chain.simple_account import SimpleAccountOwner
from chain.stack import LOCAL_CHAIN_IDS
from core.chains import Chain, all_chains, card_chain
from core.lifecycle import Actor, transition
from dev.providers.local_ramps import DEMO_AVENIA_SUBACCOUNT, DEMO_MONERIUM_PROFILE
from dev.testing import wait_until
from evm.rpc import http_web3

RECIPIENT = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"  # Hardhat dev account #1
DEMO = {
    name: uuid.uuid5(uuid.NAMESPACE_URL, f"picnic-demo/{name}")
    for name in (
        "proposed",
        "rejected",
        "expired",
        "executed",
        "failed",
        "submitted-error",
    )
}


def local_chains() -> list[Chain]:
    """The chains of the table the local stack runs (the demo contracts are there)."""
    return [chain for chain in all_chains() if chain.id in LOCAL_CHAIN_IDS]


def ensure_demo_tokens() -> list[Token]:
    """Token rows for the demo ERC-20s the chain stack deploys (USDC-like, EURe-like), on
    every local chain (same CREATE2 addresses on each)."""
    tokens = []
    for chain in local_chains():
        tokens += _ensure_demo_tokens(chain.id)
    return tokens


def _ensure_demo_tokens(chain_id: int) -> list[Token]:

    tokens = []
    for symbol, (name, decimals, _salt) in contracts.DEMO_TOKENS.items():
        token, _ = Token.objects.update_or_create(
            chain_id=chain_id,
            address=contracts.demo_token_address(symbol),
            defaults={
                "symbol": symbol,
                "name": name,
                "decimals": decimals,
                "price_id": DEMO_PRICE_IDS[symbol],
                "ramp_provider": DEMO_RAMP_PROVIDERS.get(symbol, ""),
            },
        )
        tokens.append(token)
    underlying = {t.symbol: t for t in tokens}
    for symbol, (name, asset) in contracts.DEMO_VAULTS.items():
        vault, _ = Token.objects.update_or_create(
            chain_id=chain_id,
            address=contracts.demo_vault_address(symbol),
            defaults={
                "symbol": symbol,
                "name": name,
                "decimals": underlying[asset].decimals,  # ERC-4626 with no decimals offset
                "price_id": "",  # valued through the vault: convertToAssets × the asset's price
                "vault_asset": underlying[asset],
            },
        )
        tokens.append(vault)
    return tokens


# The real coins the demo tokens stand in for, as the price source names them.
DEMO_PRICE_IDS = {"USDC": "usd-coin", "EURe": "monerium-eur-money"}
# EURe is Monerium's e-money: its mints and burns are EUR ramps.
DEMO_RAMP_PROVIDERS = {"EURe": "monerium"}


def provision_card(*, user, card_id: str, last4: str) -> Card:
    """Dev chain only: deploy the user's passkey account and its 1/1 Safe, and record a card.
    (In production Gnosis Pay onboarding creates the Safe; here the dev key pays for it.)"""

    chain = card_chain()
    account = SmartAccount.objects.select_related("passkey").get(
        user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False, chain_id=chain.id
    )
    w3 = http_web3(chain.rpc_url, timeout=10, retries=True)
    client = passkey_client(w3, account)
    dev = w3.eth.accounts[0]
    if not client.is_deployed():
        w3.eth.wait_for_transaction_receipt(
            client.factory.functions.createAccount(client.qx, client.qy, client.salt).transact(
                {"from": dev}
            )
        )
    cooldown = settings.CARD_DELAY_COOLDOWN_SECONDS
    expiration = settings.CARD_DELAY_EXPIRATION_SECONDS
    safe = deploy_safe(w3, account.address, sender=dev, delay=DelayConfig(cooldown, expiration))
    SmartAccount.objects.get_or_create(
        chain_id=chain.id,
        address=safe,
        defaults={
            "user": user,
            "kind": SmartAccountKind.GNOSIS_PAY,
            "owner": f"account:{account.address}",
        },
    )
    # The dev chain starts empty on every run: the card follows the freshly deployed Safe.
    card, _ = Card.objects.update_or_create(
        card_id=card_id,
        defaults={
            "user": user,
            "last4": last4,
            "safe_address": safe,
            "chain_id": chain.id,
            "delay_address": zodiac.delay_address(safe, cooldown, expiration),
            "roles_address": zodiac.roles_address(safe),
            "token": Token.objects.filter(
                chain_id=chain.id, address=contracts.demo_token_address("EURe")
            ).first(),
        },
    )
    return card


def demo_owner_key(username: str) -> str:
    # Demo only: a deterministic EOA owner for the local SimpleAccount (passkeys come later).
    return "0x" + keccak(text=f"picnic demo owner {username}").hex()


def seed_actions(*, user, application, say: Callable[[str], None]) -> SmartAccount:
    ensure_demo_tokens()
    # The demo actions live on the card's chain; the passkey accounts are funded on every one.
    chain = card_chain()
    w3 = http_web3(chain.rpc_url, timeout=10, retries=True)
    bundler = bundler_client(chain.id, timeout=15)
    version = settings.ENTRY_POINT_VERSION
    owner = SimpleAccountOwner(w3, owner_key=demo_owner_key(user.username), version=version)
    account, _ = SmartAccount.objects.update_or_create(
        chain_id=chain.id,
        address=owner.address,
        defaults={
            "user": user,
            "kind": SmartAccountKind.PICNIC,
            "entry_point_version": version,
            "factory": owner.factory.address,
            "owner": f"eoa:{owner.owner.address}",
        },
    )
    if w3.eth.get_balance(account.address) < Web3.to_wei(1, "ether"):
        fund(w3, account.address, Web3.to_wei(5, "ether"))
    say(
        f"smart account {account.address} (SimpleAccount v{version}) funded on chain {w3.eth.chain_id}"
    )

    def create(
        name: str, call_data: str, summary: str, *, sign: bool, gas=None, ttl=None
    ) -> Action | None:
        if Action.objects.filter(pk=DEMO[name]).exists():
            return None
        op = owner.build(call_data, bundler, gas=gas)
        if sign:
            op = owner.sign(op, chain_id=chain.id)
        return action_create(
            action_id=DEMO[name],
            user=user,
            application=application,
            type=ActionType.TRANSFER,
            summary=summary,
            chain_id=chain.id,
            smart_account=account.address,
            params={"asset_id": f"eip155:{chain.id}/slip44:60", "to": RECIPIENT},
            user_op=op,
            entry_point_version=version,
            ttl_seconds=ttl,
        )

    def execute(action: Action) -> None:
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.SIGNED,
            actor=Actor.end_user(user),
        )
        action_submit(action_id=action.pk, client=bundler)
        wait_until(
            lambda: (
                action_reconcile(action_id=action.pk, actor=Actor.worker(), client=bundler)
                in ("executed", "failed", "not_pending")
            ),
            timeout=60,
            interval=0.5,
        )

    send = owner.execute(RECIPIENT, Web3.to_wei("0.01", "ether"))
    if action := create("executed", send, "Send 0.01 ETH to 0x7099…79C8", sign=True):
        execute(action)
    inner = Web3.to_bytes(hexstr=owner.execute(RECIPIENT, 1))
    revert = owner.execute(account.address, 0, inner)  # reverts: "account: not Owner or EntryPoint"
    gas = {"callGasLimit": 200_000, "verificationGasLimit": 600_000, "preVerificationGas": 100_000}
    if action := create("failed", revert, "Call that reverts on-chain (demo)", sign=True, gas=gas):
        execute(action)
    if action := create("submitted-error", send, "Send 0.01 ETH (bad signature, demo)", sign=False):
        # Unsigned (dummy signature): the bundler refuses it for good (AA24), so it ends failed.
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.SIGNED,
            actor=Actor.end_user(user),
        )
        action_submit(action_id=action.pk, client=bundler)
    if action := create("rejected", send, "Send 0.01 ETH to 0x7099…79C8", sign=False):
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.REJECTED,
            actor=Actor.end_user(user),
            detail="user declined on the signing page",
        )
    if action := create("expired", send, "Send 0.01 ETH to 0x7099…79C8", sign=False, ttl=30):
        Action.objects.filter(pk=action.pk).update(expires_at=action.created_at)
        action_expire_if_overdue(action=Action.objects.get(pk=action.pk))
    create("proposed", send, "Send 0.01 ETH to 0x7099…79C8", sign=False, ttl=24 * 3600)
    # Passkey accounts the user registered in the browser get dev ETH, demo tokens and a card.
    smart_accounts_cover_chains(user=user)
    if SmartAccount.objects.filter(user=user, passkey__isnull=False).exists():
        card = provision_card(user=user, card_id=f"demo-card-{user.pk}", last4="4242")
        say(f"card •••• {card.last4} ({card.card_id}) on Safe {card.safe_address}")
    for local in local_chains():
        local_w3 = http_web3(local.rpc_url, timeout=10, retries=True)
        for passkey_account in SmartAccount.objects.filter(
            user=user, passkey__isnull=False, chain_id=local.id
        ):
            if local_w3.eth.get_balance(passkey_account.address) < Web3.to_wei(1, "ether"):
                fund(local_w3, passkey_account.address, Web3.to_wei(2, "ether"))
                mint(local_w3, "USDC", passkey_account.address, 100 * 10**6)
                mint(local_w3, "EURe", passkey_account.address, 100 * 10**18)
                say(
                    f"passkey account {passkey_account.address} funded on {local.name} with "
                    f"{local.native.symbol}, 100 USDC, 100 EURe"
                )
    seed_ens_names(user=user, account=account, owner_key=demo_owner_key(user.username), say=say)
    for name, pk in DEMO.items():
        status = Action.objects.filter(pk=pk).values_list("status", flat=True).first()
        say(f"action {pk} ({name}): {status}")
    return account


def seed_ens_names(*, user, account: SmartAccount, owner_key: str, say) -> None:
    """Dev chain only: `alice.eth` → the user's passkey account (the demo SimpleAccount until a
    passkey is registered), `merchant.eth` → the demo merchant's EOA, each with its reverse
    record where the address itself can set it (the merchant's EOA; the SimpleAccount through
    its owner). A passkey account's reverse record needs the passkey: not set here."""
    chain = card_chain()
    if chain.ens_registry.lower() != ens.registry_address().lower():
        say(f"ENS: {chain.name} names no local registry; no demo names")
        return
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    passkey_account = (
        SmartAccount.objects.filter(user=user, passkey__isnull=False, chain_id=chain.id)
        .order_by("-pk")
        .first()
    )
    alice = passkey_account.address if passkey_account else account.address
    ens.register(w3, "alice.eth", alice)
    if alice == account.address and w3.eth.get_code(account.address):
        ens.set_reverse_name_of_simple_account(w3, owner_key, account.address, "alice.eth")
    merchant = w3.eth.account.from_key(ens.MERCHANT_KEY).address
    ens.register(w3, "merchant.eth", merchant)
    ens.set_reverse_name_of_eoa(w3, ens.MERCHANT_KEY, "merchant.eth")
    say(f"ENS on {chain.name}: alice.eth → {alice}, merchant.eth → {merchant} (with reverse)")


def seed_ramps(*, user) -> None:
    """Link the demo user to the local ramp servers' demo accounts (no chain needed)."""

    ids = {RampCurrency.EUR: DEMO_MONERIUM_PROFILE, RampCurrency.BRL: DEMO_AVENIA_SUBACCOUNT}
    for currency, external_id in ids.items():
        RampAccount.objects.get_or_create(
            user=user,
            currency=currency,
            defaults={"provider": RAMP_PROVIDER_FOR[currency], "external_id": external_id},
        )
