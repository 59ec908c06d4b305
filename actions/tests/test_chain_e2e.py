"""Real user operations through the real Alto bundler on the local chain, then reconciled."""

from __future__ import annotations

import secrets

import pytest
from django.utils import timezone
from web3 import Web3

from actions.evm_clients import bundler_client
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.services import action_submit, actions_reconcile_pending
from actions.tests.factories import make_action
from chain.dev import fund
from chain.simple_account import SimpleAccountOwner
from chain.stack import free_port
from core.chains import with_endpoints
from core.lifecycle import Actor, transition
from dev.testing import wait_until
from evm.userops import to_rpc

pytestmark = [pytest.mark.chain, pytest.mark.django_db]

RECIPIENT = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


def _funded_account(w3: Web3, version: str) -> SimpleAccountOwner:
    account = SimpleAccountOwner(w3, owner_key="0x" + secrets.token_hex(32), version=version)
    fund(w3, account.address, Web3.to_wei(1, "ether"))
    return account


def _propose_signed(user, application, account, op, version, chain_id) -> Action:
    action = make_action(
        user=user,
        application=application,
        user_op=account.sign(op, chain_id=chain_id),
        entry_point_version=version,
        smart_account=account.address,
        chain_id=chain_id,
    )
    transition(
        lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=ActionStatus.SIGNED, actor=Actor.end_user(user)
    )
    return action


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_a_real_user_operation_executes_and_get_action_status_reconciles_it(
    chain_settings, user, application, make_token, api_client, version
):
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    bundler = bundler_client(31337)
    account = _funded_account(w3, version)
    before = w3.eth.get_balance(RECIPIENT)
    op = account.build(account.execute(RECIPIENT, Web3.to_wei("0.01", "ether")), bundler)
    action = _propose_signed(user, application, account, op, version, w3.eth.chain_id)

    action = action_submit(action_id=action.pk, client=bundler)
    # The bundler's userOpHash is the one we computed at proposal time.
    assert action.status == ActionStatus.BROADCAST, action.error
    assert action.broadcast_at is not None and action.error is None

    token = make_token(user, application)

    def status() -> dict:
        body = api_client.get(f"/api/v1/actions/{action.pk}", token).json()
        return body if body["status"] != "broadcast" else None

    body = wait_until(status, timeout=60, interval=0.5)
    assert body["status"] == "executed"
    receipt = w3.eth.get_transaction_receipt(body["tx_hash"])
    assert receipt["status"] == 1
    assert body["block_number"] == receipt["blockNumber"]
    assert body["executed_at"] is not None and body["error"] is None
    assert w3.eth.get_balance(RECIPIENT) - before == Web3.to_wei("0.01", "ether")
    assert account.is_deployed()
    history = Action.objects.get(pk=action.pk).history.order_by("timestamp", "id")
    assert [h.status for h in history] == [
        "proposed",
        "signed",
        "submitted",
        "broadcast",
        "executed",
    ]
    executed = history.last()
    assert executed.payload["receipt"]["transactionHash"] == body["tx_hash"]
    assert executed.detail.startswith("get_action_status: included in block")


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_a_reverting_user_operation_ends_failed_with_the_reason(
    chain_settings, user, application, version
):
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    bundler = bundler_client(31337)
    account = _funded_account(w3, version)
    # The account calling its own execute() is neither owner nor EntryPoint: the inner call
    # reverts with "account: not Owner or EntryPoint", and execute() bubbles that up.
    inner = Web3.to_bytes(hexstr=account.execute(RECIPIENT, 1))
    call_data = account.execute(account.address, 0, inner)
    gas = {"callGasLimit": 200_000, "verificationGasLimit": 600_000, "preVerificationGas": 100_000}
    op = account.build(call_data, bundler, gas=gas)
    action = _propose_signed(user, application, account, op, version, w3.eth.chain_id)
    action = action_submit(action_id=action.pk, client=bundler)
    assert action.status == ActionStatus.BROADCAST, action.error

    def settled():
        actions_reconcile_pending(client=bundler)
        return Action.objects.get(pk=action.pk).status != ActionStatus.BROADCAST

    wait_until(settled, timeout=60, interval=0.5)
    action.refresh_from_db()
    assert action.status == ActionStatus.FAILED
    assert action.error == "account: not Owner or EntryPoint"
    assert w3.eth.get_transaction_receipt(action.tx_hash)["blockNumber"] == action.block_number
    failed = action.history.get(status=ActionStatus.FAILED)
    assert failed.detail == "account: not Owner or EntryPoint"
    assert failed.actor_kind == "worker"
    assert failed.payload["success"] is False


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_a_bundler_validation_refusal_fails_the_action_with_the_reason(
    chain_settings, user, application, version
):
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    bundler = bundler_client(31337)
    account = _funded_account(w3, version)
    op = account.build(account.execute(RECIPIENT, 1), bundler)
    action = _propose_signed(user, application, account, op, version, w3.eth.chain_id)
    # Tamper after signing: the signature no longer matches the userOpHash.
    Action.objects.filter(pk=action.pk).update(
        user_op={
            **action.user_op,
            "signature": account.sign({**op, "nonce": 99}, chain_id=31337)["signature"],
        }
    )
    action = action_submit(action_id=action.pk, client=bundler)
    # ERC-7769: -32507 is a wallet signature check failure (AA24 in the EntryPoint); no later
    # attempt can change that for this signed op.
    assert action.status == ActionStatus.FAILED
    assert action.error.startswith("bundler rejected (-32507)"), action.error
    assert "AA24" in action.error
    failed = action.history.last()
    assert (failed.from_status, failed.status) == ("submitted", "failed")
    assert failed.detail == action.error and failed.payload["code"] == -32507


def _user_op_events(w3: Web3, entry_point: str, op_hash: str) -> list:
    topic = Web3.keccak(
        text="UserOperationEvent(bytes32,address,address,uint256,bool,uint256,uint256)"
    )
    return w3.eth.get_logs(
        {"address": entry_point, "fromBlock": 0, "toBlock": "latest", "topics": [topic, op_hash]}
    )


def _settle(action_id) -> Action:
    def settled():
        actions_reconcile_pending()
        action = Action.objects.get(pk=action_id)
        return action if action.status in ("executed", "failed") else None

    return wait_until(settled, timeout=60, interval=0.5)


@pytest.mark.parametrize("version", ["0.7", "0.8"])
def test_a_bundler_down_at_submission_is_resent_on_recovery_and_executes_once(
    chain_settings, settings, user, application, version
):
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    account = _funded_account(w3, version)
    op = account.build(account.execute(RECIPIENT, 12345), bundler_client(31337))
    action = _propose_signed(user, application, account, op, version, w3.eth.chain_id)
    before = w3.eth.get_balance(RECIPIENT)

    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, bundler_url=f"http://127.0.0.1:{free_port()}"
    )  # nothing listens there
    action = action_submit(action_id=action.pk)
    assert action.status == ActionStatus.SUBMITTED
    assert action.error.startswith("bundler unreachable: eth_sendUserOperation"), action.error

    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, bundler_url=chain_settings.bundler_url
    )  # the bundler is back
    Action.objects.filter(pk=action.pk).update(next_submit_at=timezone.now())  # backoff over
    action = _settle(action.pk)
    assert action.status == ActionStatus.EXECUTED, action.error
    assert action.error is None and action.submit_attempts == 2
    assert len(_user_op_events(w3, action.entry_point, action.user_op_hash)) == 1
    assert w3.eth.get_balance(RECIPIENT) - before == 12345
    assert [h.status for h in action.history.order_by("timestamp", "id")] == [
        "proposed",
        "signed",
        "submitted",
        "broadcast",
        "executed",
    ]


def test_an_op_whose_nonce_another_op_used_ends_failed_as_dropped(
    chain_settings, settings, user, application
):
    w3 = Web3(Web3.HTTPProvider(chain_settings.rpc_url))
    bundler = bundler_client(31337)
    account = _funded_account(w3, "0.7")
    op = account.build(account.execute(RECIPIENT, 1), bundler)
    action = _propose_signed(user, application, account, op, "0.7", w3.eth.chain_id)
    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, bundler_url=f"http://127.0.0.1:{free_port()}"
    )
    action = action_submit(action_id=action.pk)
    assert action.status == ActionStatus.SUBMITTED

    # Meanwhile another op with the same nonce is signed elsewhere and included.
    other = account.sign(account.build(account.execute(RECIPIENT, 2), bundler), chain_id=31337)
    assert other["nonce"] == op["nonce"]
    other_hash = bundler.send_user_operation(to_rpc(other), account.entry_point)
    wait_until(lambda: bundler.get_user_operation_receipt(other_hash), timeout=60, interval=0.5)

    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url=chain_settings.bundler_url)
    action = _settle(action.pk)
    assert action.status == ActionStatus.FAILED
    assert action.error == "dropped: nonce used by another operation"
    assert action.tx_hash is None
    assert not _user_op_events(w3, action.entry_point, action.user_op_hash)
