"""Reconciliation against a bundler that answers, hangs, errors or talks garbage."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from actions import tasks
from actions.evm_clients import bundler_client
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.retention import actions_purge_retained
from actions.execution.services import action_reconcile, action_submit, actions_expire_overdue
from actions.execution.transitions import ReconcileOutcome
from actions.tests.factories import make_action
from core.chains import with_endpoints
from core.lifecycle import Actor, transition
from dev.testing import ScriptedServer

S = ActionStatus
TX = "0x" + "ab" * 32
NONCE_0 = "0x" + "00" * 32
ERROR_STRING = (
    "0x08c379a0"
    "0000000000000000000000000000000000000000000000000000000000000020"
    "0000000000000000000000000000000000000000000000000000000000000012"
    "696e73756666696369656e742066756e64730000000000000000000000000000"
)


def receipt(success: bool = True, reason: str = "0x") -> dict:
    return {
        "userOpHash": "0x" + "11" * 32,
        "success": success,
        "reason": reason,
        "actualGasUsed": "0x1",
        "receipt": {"transactionHash": TX, "blockNumber": "0x2a"},
    }


@pytest.fixture
def bundler(settings):
    with ScriptedServer() as server:
        settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url=server.url)
        # The same server answers the EntryPoint's getNonce: 0, not consumed by the test op.
        settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, rpc_url=server.url)
        server.results["eth_call"] = NONCE_0
        # Short, for the hang cases, but not so short that a busy CI host (a pause of this
        # process, which serves the script too) reads as a hang: one failed a run at 0.5 s.
        settings.BUNDLER_TIMEOUT_SECONDS = 2.0
        yield server


@pytest.fixture
def broadcast_action(user, application):
    action = make_action(user=user, application=application)
    for step in (S.SIGNED, S.SUBMITTED, S.BROADCAST):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    return action


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application)


def test_a_successful_receipt_executes_the_action(bundler, broadcast_action):
    bundler.result = receipt()
    outcome = action_reconcile(action_id=broadcast_action.pk, actor=Actor.worker())
    assert outcome == ReconcileOutcome.EXECUTED
    broadcast_action.refresh_from_db()
    assert broadcast_action.status == S.EXECUTED
    assert (broadcast_action.tx_hash, broadcast_action.block_number) == (TX, 42)
    assert broadcast_action.executed_at is not None
    assert bundler.requests[-1]["method"] == "eth_getUserOperationReceipt"
    assert bundler.requests[-1]["params"] == [broadcast_action.user_op_hash]


def test_a_failed_receipt_fails_the_action_with_the_decoded_reason(bundler, broadcast_action):
    bundler.result = receipt(success=False, reason=ERROR_STRING)
    assert action_reconcile(action_id=broadcast_action.pk, actor=Actor.worker()) == "failed"
    broadcast_action.refresh_from_db()
    assert broadcast_action.status == S.FAILED
    assert broadcast_action.error == "insufficient funds"
    row = broadcast_action.history.get(status=S.FAILED)
    assert row.detail == "insufficient funds"
    assert row.payload == receipt(success=False, reason=ERROR_STRING)


def test_a_submitted_action_can_be_reconciled_straight_to_executed(bundler, user, application):
    action = make_action(user=user, application=application)
    for step in (S.SIGNED, S.SUBMITTED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    bundler.result = receipt()
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "executed"
    assert Action.objects.get(pk=action.pk).status == S.EXECUTED


def test_a_pending_receipt_changes_nothing(bundler, broadcast_action):
    bundler.result = None
    # The bundler holds the op (ERC-7769 returns pending ops by hash): nothing is sent again.
    bundler.results["eth_getUserOperationByHash"] = {"userOpHash": broadcast_action.user_op_hash}
    assert action_reconcile(action_id=broadcast_action.pk, actor=Actor.worker()) == "pending"
    broadcast_action.refresh_from_db()
    assert broadcast_action.status == S.BROADCAST
    assert broadcast_action.last_reconciled_at is not None
    assert "eth_sendUserOperation" not in [r["method"] for r in bundler.requests]


@pytest.mark.parametrize(
    ("mode", "result", "expected_error"),
    [
        ("hang", None, "Timeout"),
        ("http500", None, "500"),
        ("garbage", None, "eth_getUserOperationReceipt"),
        ("drop", None, "eth_getUserOperationReceipt"),
        ("rpc_error", None, "scripted error"),
        ("result", "not a receipt", "malformed receipt"),
        ("result", {"success": "yes", "receipt": {}}, "malformed receipt"),
        (
            "result",
            {**receipt(), "receipt": {"transactionHash": "0x12", "blockNumber": "0x1"}},
            "transactionHash",
        ),
        (
            "result",
            {**receipt(), "receipt": {"transactionHash": TX, "blockNumber": "latest"}},
            "blockNumber",
        ),
    ],
)
def test_a_broken_bundler_never_raises_and_keeps_the_status(
    bundler, broadcast_action, api_client, token, mode, result, expected_error
):
    bundler.mode = mode
    bundler.result = result
    response = api_client.get(f"/api/v1/actions/{broadcast_action.pk}", token)
    assert response.status_code == 200
    assert response.json()["status"] == "broadcast"
    broadcast_action.refresh_from_db()
    assert broadcast_action.status == S.BROADCAST
    assert broadcast_action.history.count() == 4
    assert expected_error in broadcast_action.last_reconcile_error
    assert len(bundler.requests) == 1  # no silent retries multiplying the timeout


def test_a_bundler_that_refuses_connections_is_unavailable(settings, broadcast_action):
    settings.CHAINS = with_endpoints(
        settings.CARD_CHAIN_ID, bundler_url="http://127.0.0.1:9"
    )  # discard port: nothing listens
    assert action_reconcile(action_id=broadcast_action.pk, actor=Actor.worker()) == "unavailable"
    assert Action.objects.get(pk=broadcast_action.pk).status == S.BROADCAST


def test_get_action_status_reconciles_before_answering(
    bundler, broadcast_action, api_client, token
):
    bundler.result = receipt()
    body = api_client.get(f"/api/v1/actions/{broadcast_action.pk}", token).json()
    assert body["status"] == "executed"
    assert body["tx_hash"] == TX and body["block_number"] == 42
    assert (
        body["status_history"][-1]["detail"] == f"get_action_status: included in block 42, tx {TX}"
    )


def test_reading_a_terminal_or_proposed_action_does_not_call_the_bundler(
    bundler, user, application, api_client, token
):
    action = make_action(user=user, application=application)
    api_client.get(f"/api/v1/actions/{action.pk}", token)
    assert bundler.requests == []


def test_the_periodic_task_reconciles_pending_actions_in_batches(
    bundler, user, application, settings
):
    settings.ACTIONS_RECONCILE_BATCH_SIZE = 2
    pending = []
    for _ in range(3):
        action = make_action(user=user, application=application)
        for step in (S.SIGNED, S.SUBMITTED, S.BROADCAST):
            transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
        pending.append(action.pk)
    bundler.result = None
    assert tasks.actions_reconcile_pending_task() == {"pending": 2}
    # The next batch starts with the one not yet asked about.
    bundler.result = receipt()
    assert tasks.actions_reconcile_pending_task() == {"executed": 2}
    statuses = sorted(Action.objects.filter(pk__in=pending).values_list("status", flat=True))
    assert statuses == ["broadcast", "executed", "executed"]
    assert tasks.actions_reconcile_pending_task() == {"executed": 1}


def test_submit_records_a_transient_bundler_error_and_stays_submitted(bundler, user, application):
    action = make_action(user=user, application=application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.end_user(user))
    bundler.mode = "rpc_error"
    bundler.error = {"code": -32603, "message": "internal error"}
    action = action_submit(action_id=action.pk, client=bundler_client(31337))
    assert action.status == S.SUBMITTED
    assert action.error == "bundler rejected (-32603): internal error"
    # Reconciliation later finds it was mined after all: the stale error is cleared.
    bundler.mode, bundler.result = "result", receipt()
    action_reconcile(action_id=action.pk, actor=Actor.worker())
    action.refresh_from_db()
    assert action.status == S.EXECUTED and action.error is None


def test_submit_that_times_out_stays_submitted(bundler, user, application):
    action = make_action(user=user, application=application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.end_user(user))
    bundler.mode = "hang"
    action = action_submit(action_id=action.pk)
    assert action.status == S.SUBMITTED
    assert action.error.startswith("bundler unreachable: eth_sendUserOperation")


def test_the_beat_task_expires_overdue_proposed_actions(user, application):
    overdue = make_action(user=user, application=application)
    fresh = make_action(user=user, application=application)
    Action.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(seconds=5))
    assert tasks.actions_expire_overdue_task() == 1
    overdue.refresh_from_db()
    fresh.refresh_from_db()
    assert (overdue.status, fresh.status) == (S.EXPIRED, S.PROPOSED)
    row = overdue.history.last()
    assert (row.status, row.actor_kind, row.detail) == (
        "expired",
        "system",
        "TTL passed before the user signed",
    )
    assert actions_expire_overdue() == 0


def test_an_overdue_action_signed_just_before_expiry_is_not_expired(user, application):
    action = make_action(user=user, application=application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.end_user(user))
    Action.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(seconds=5))
    assert actions_expire_overdue() == 0
    assert Action.objects.get(pk=action.pk).status == S.SIGNED


def test_the_purge_task_deletes_old_terminal_actions_only(user, application):
    old_done = make_action(user=user, application=application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=old_done.pk, to=S.REJECTED, actor=Actor.system())
    old_stuck = make_action(user=user, application=application)
    for step in (S.SIGNED, S.SUBMITTED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=old_stuck.pk, to=step, actor=Actor.system())
    recent_done = make_action(user=user, application=application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=recent_done.pk, to=S.REJECTED, actor=Actor.system())
    day_ago = timezone.now() - timedelta(hours=25)
    Action.objects.filter(pk__in=[old_done.pk, old_stuck.pk]).update(created_at=day_ago)

    assert actions_purge_retained() == 3  # the action and its two history rows
    assert set(Action.objects.values_list("pk", flat=True)) == {old_stuck.pk, recent_done.pk}


@pytest.mark.postgres  # a transition is one statement there (core.lifecycle's CTE)
def test_one_reconcile_item_costs_a_fixed_number_of_statements(
    bundler, broadcast_action, django_assert_num_queries
):
    from actions.execution.services import actions_reconcile_pending

    # Still pending (the bundler holds the op, no receipt yet): the batch's ids, the action,
    # its reconciliation stamp. Nothing to clear, so nothing else is written.
    bundler.results = {
        "eth_getUserOperationReceipt": None,
        "eth_getUserOperationByHash": {"userOpHash": broadcast_action.user_op_hash},
    }
    with django_assert_num_queries(3):
        assert actions_reconcile_pending(batch_size=10) == {ReconcileOutcome.PENDING: 1}
    # Settled: then the transition from the status just read (conditional UPDATE and history
    # INSERT in one statement; no savepoint of its own), with no read of the status before it.
    bundler.results = {"eth_getUserOperationReceipt": receipt()}
    with django_assert_num_queries(4):
        assert actions_reconcile_pending(batch_size=10) == {ReconcileOutcome.EXECUTED: 1}
    broadcast_action.refresh_from_db()
    assert broadcast_action.status == S.EXECUTED
    assert broadcast_action.history.last().from_status == S.BROADCAST
