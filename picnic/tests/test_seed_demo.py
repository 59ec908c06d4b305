"""seed_demo: idempotent demo data, with real on-chain demo actions."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from oauth2_provider.models import AccessToken, Application

from actions.accounts.models import SmartAccount
from actions.execution.models import Action, ActionStatus
from dev.demo.actions import DEMO
from dev.management.commands.seed_demo import demo_logins, demo_token
from messaging.models import Delivery
from operations.models import Operation, Wallet


@pytest.mark.chain
@pytest.mark.django_db
def test_it_creates_demo_data_once_with_actions_in_different_states(chain_settings, settings):
    settings.DEBUG = True  # the test runner forces DEBUG off; seed_demo is for local runs
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    first = out.getvalue()
    counts = (
        Action.objects.count(),
        AccessToken.objects.count(),
        Application.objects.count(),
        Delivery.objects.count(),
        Operation.objects.count(),
    )
    call_command("seed_demo", stdout=io.StringIO())
    assert (
        Action.objects.count(),
        AccessToken.objects.count(),
        Application.objects.count(),
        Delivery.objects.count(),
        Operation.objects.count(),
    ) == counts

    statuses = dict(Action.objects.filter(pk__in=DEMO.values()).values_list("pk", "status"))
    assert statuses == {
        DEMO["proposed"]: ActionStatus.PROPOSED,
        DEMO["rejected"]: ActionStatus.REJECTED,
        DEMO["expired"]: ActionStatus.EXPIRED,
        DEMO["executed"]: ActionStatus.EXECUTED,
        DEMO["failed"]: ActionStatus.FAILED,
        DEMO["submitted-error"]: ActionStatus.FAILED,  # AA24 is a final refusal
    }
    assert "AA24" in Action.objects.get(pk=DEMO["submitted-error"]).error
    account = SmartAccount.objects.get(user__username="alice")
    assert Action.objects.filter(smart_account=account.address).count() == 6
    token = AccessToken.objects.get(user__username="alice")
    assert "user alice password alice-demo-password" in first
    assert f"bearer token  {token.token}" in first
    assert (
        "scopes        read:actions write:actions agent:dm_read agent:dm_write "
        "operations:read operations:write read:balances read:accounts read:card "
        "read:transactions read:profile" in first
    )
    assert sorted(Operation.objects.values_list("state", flat=True)) == [
        "needs_review",
        "queued",
        "queued",
    ]
    assert Wallet.objects.get(owner__username="alice").held_credits > 0
    assert Delivery.objects.count() == 3
    assert set(Delivery.objects.values_list("status", flat=True)) == {"queued"}
    # ENS demo names: alice.eth → the demo account (no passkey yet), merchant.eth → the
    # merchant's EOA, both with a verified reverse record.
    from web3 import Web3

    from chain import ens as local_ens
    from evm.ens import EnsReader

    reader = EnsReader(
        Web3(Web3.HTTPProvider(chain_settings.rpc_url)), local_ens.registry_address()
    )
    merchant = Web3().eth.account.from_key(local_ens.MERCHANT_KEY).address
    assert reader.resolve("alice.eth") == account.address
    assert reader.resolve("merchant.eth") == merchant
    assert reader.reverse_name(account.address) == "alice.eth"
    assert reader.reverse_name(merchant) == "merchant.eth"
    assert f"alice.eth → {account.address}, merchant.eth → {merchant}" in first


@pytest.mark.django_db
def test_it_refuses_to_run_outside_debug(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="refuses DJANGO_DEBUG=false"):
        call_command("seed_demo", "--skip-chain")


@pytest.mark.django_db
def test_it_ends_with_the_demo_logins_make_run_prints_last(settings):
    settings.DEBUG = True
    out = io.StringIO()
    call_command("seed_demo", "--skip-chain", stdout=out)
    token = AccessToken.objects.get(user__username="alice")
    assert demo_token() == token.token
    assert token.resource == [settings.MCP_RESOURCE_URL]
    assert out.getvalue().splitlines()[-4:] == [
        "  staff login   http://127.0.0.1:8000/admin/ and /staff/  "
        "user staff password picnic-staff-demo",
        "  end user      http://localhost:8000/passkeys/  user alice password alice-demo-password",
        f"  bearer token  {token.token}  (alice's agent, every scope: "
        f"the MCP server {settings.MCP_RESOURCE_URL} and the API)",
        f"  scopes        {token.scope}",
    ]
    assert demo_logins(token.token, web="127.0.0.1:9000")[1].startswith(
        "end user      http://localhost:9000/passkeys/"
    )
