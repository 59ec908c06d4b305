"""Every signed action reaches a true end: refusals, re-sends, dropped ops, staff resolution.

A scripted JSON-RPC server plays the bundler and the chain (the EntryPoint's getNonce); the
same paths on the real chain stack are in test_submission_chain.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.services import (
    ActionResolutionError,
    action_mark_failed,
    action_reconcile,
    action_resend,
    action_submit,
    actions_reconcile_pending,
)
from actions.execution.transitions import ReconcileOutcome, action_touch
from actions.tests.factories import make_action
from core.lifecycle import Actor, entity_changed, transition
from dev.testing import RpcError
from evm.bundler import FINAL_SUBMISSION_CODES

from .conftest import nonce_word

S = ActionStatus
TX = "0x" + "ab" * 32
pytestmark = pytest.mark.django_db


def receipt(success: bool = True) -> dict:
    return {
        "success": success,
        "reason": "0x",
        "receipt": {"transactionHash": TX, "blockNumber": "0x2a"},
    }


def methods(server) -> list[str]:
    return [r["method"] for r in server.requests]


def signed(user, application) -> Action:
    action = make_action(user=user, application=application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.end_user(user))
    return action


def refuse(server, code: int, message: str) -> None:
    server.errors["eth_sendUserOperation"] = {"code": code, "message": message}


@pytest.mark.parametrize("code", sorted(FINAL_SUBMISSION_CODES))
def test_a_refusal_that_can_never_succeed_fails_the_action(rpc, user, application, code):
    action = signed(user, application)
    refuse(rpc, code, "UserOperation reverted with reason: AA26 over verificationGasLimit")
    action = action_submit(action_id=action.pk)
    expected = f"bundler rejected ({code}): UserOperation reverted with reason: AA26 over verificationGasLimit"
    assert action.status == S.FAILED and action.error == expected
    last = action.history.order_by("timestamp", "id").last()
    assert (last.from_status, last.status, last.detail) == ("submitted", "failed", expected)
    assert last.payload["code"] == code


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("hang", "bundler unreachable: eth_sendUserOperation"),
        ("http500", "bundler unreachable: eth_sendUserOperation"),
        ("garbage", "bundler unreachable: eth_sendUserOperation"),
        ("drop", "bundler unreachable: eth_sendUserOperation"),
    ],
)
def test_a_transient_failure_keeps_submitted_and_the_same_op_is_sent_again(
    rpc, user, application, mode, error
):
    action = signed(user, application)
    rpc.mode = mode
    action = action_submit(action_id=action.pk)
    assert action.status == S.SUBMITTED and action.error.startswith(error)
    assert action.submit_attempts == 1 and action.next_submit_at > timezone.now()

    # Before the backoff has passed: the bundler is asked, nothing is sent.
    rpc.mode = "result"
    rpc.requests.clear()
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "pending"
    assert "eth_sendUserOperation" not in methods(rpc)

    # Due: receipt? held? nonce used? then the same signed op again, accepted.
    Action.objects.filter(pk=action.pk).update(next_submit_at=timezone.now())
    rpc.results["eth_sendUserOperation"] = action.user_op_hash
    action_reconcile(action_id=action.pk, actor=Actor.worker())
    assert [m for m in methods(rpc) if m != "eth_chainId"][-4:] == [
        "eth_getUserOperationReceipt",
        "eth_getUserOperationByHash",
        "eth_call",
        "eth_sendUserOperation",
    ]
    sent = [r for r in rpc.requests if r["method"] == "eth_sendUserOperation"]
    assert len(sent) == 1 and sent[0]["params"][0]["sender"] == action.user_op["sender"]
    action.refresh_from_db()
    assert action.status == S.BROADCAST and action.error is None
    assert action.submit_attempts == 2
    assert [h.status for h in action.history.all()][-2:] == ["submitted", "broadcast"]


def test_backoff_doubles_and_is_capped(rpc, user, application, settings):
    settings.ACTIONS_RESEND_BACKOFF_SECONDS = 10
    settings.ACTIONS_RESEND_BACKOFF_MAX_SECONDS = 30
    action = signed(user, application)
    rpc.mode = "http500"
    action_submit(action_id=action.pk)
    delays = []
    for _ in range(3):
        action.refresh_from_db()
        delays.append(round((action.next_submit_at - timezone.now()).total_seconds()))
        Action.objects.filter(pk=action.pk).update(next_submit_at=timezone.now())
        rpc.mode = "result"
        rpc.results["eth_sendUserOperation"] = None  # malformed: transient again
        action_reconcile(action_id=action.pk, actor=Actor.worker())
    assert delays == [10, 20, 30]


def test_an_op_the_bundler_already_holds_is_broadcast(rpc, user, application):
    action = signed(user, application)
    refuse(rpc, -32602, "Already known")
    action = action_submit(action_id=action.pk)
    assert action.status == S.BROADCAST and action.error is None


def test_a_submitted_op_the_bundler_reports_by_hash_is_broadcast_without_a_send(
    rpc, user, application
):
    action = signed(user, application)
    rpc.mode = "http500"
    action = action_submit(action_id=action.pk)
    rpc.mode = "result"
    rpc.results["eth_getUserOperationByHash"] = {"userOpHash": action.user_op_hash}
    rpc.requests.clear()
    action_reconcile(action_id=action.pk, actor=Actor.worker(), force_resend=True)
    assert "eth_sendUserOperation" not in methods(rpc)
    assert Action.objects.get(pk=action.pk).status == S.BROADCAST


@pytest.mark.parametrize("status", [S.SUBMITTED, S.BROADCAST])
def test_an_op_whose_nonce_another_op_used_is_dropped(rpc, user, application, status):
    action = signed(user, application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SUBMITTED, actor=Actor.worker())
    if status == S.BROADCAST:
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.BROADCAST, actor=Actor.worker())
    rpc.results["eth_call"] = nonce_word(1)
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "failed"
    action.refresh_from_db()
    assert action.error == "dropped: nonce used by another operation"
    assert "EntryPoint nonce is now 1, this op had 0" in action.history.last().detail
    assert "eth_sendUserOperation" not in methods(rpc)


def test_a_used_nonce_with_a_receipt_on_the_second_look_is_executed(rpc, user, application):
    action = signed(user, application)
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SUBMITTED, actor=Actor.worker())
    rpc.results["eth_call"] = nonce_word(1)
    answers = iter([None, receipt()])  # included between the two questions

    def handler(request):
        if request["method"] == "eth_getUserOperationReceipt":
            return next(answers)
        return rpc.results.get(request["method"])

    rpc.handler = handler
    assert action_reconcile(action_id=action.pk, actor=Actor.worker()) == "executed"
    assert Action.objects.get(pk=action.pk).tx_hash == TX


def test_a_resend_refused_because_the_op_was_just_included_settles_from_the_receipt(
    rpc, user, application
):
    action = signed(user, application)
    rpc.mode = "http500"
    action_submit(action_id=action.pk)
    rpc.mode = "result"
    answers = iter([None, receipt()])

    def handler(request):
        if request["method"] == "eth_getUserOperationReceipt":
            return next(answers)
        if request["method"] == "eth_sendUserOperation":
            raise RpcError(-32500, "AA25 invalid account nonce")
        return rpc.results.get(request["method"])

    rpc.handler = handler
    action_reconcile(action_id=action.pk, actor=Actor.worker(), force_resend=True)
    action = Action.objects.get(pk=action.pk)
    assert action.status == S.EXECUTED and action.error is None


def test_an_error_recorded_without_a_transition_is_an_event(
    rpc, user, application, django_capture_on_commit_callbacks
):
    action = signed(user, application)
    before = Action.objects.get(pk=action.pk).updated_at
    heard = []

    def listener(sender, pk, status, lifecycle, **kwargs):
        heard.append((str(pk), status, lifecycle.name))

    entity_changed.connect(listener)
    try:
        rpc.mode = "http500"
        with django_capture_on_commit_callbacks(execute=True):
            action_submit(action_id=action.pk)
        # The transition to submitted is a status_changed; the error is the entity_changed.
        assert heard == [(str(action.pk), "submitted", "action")]
        after = Action.objects.get(pk=action.pk).updated_at
        assert after > before
        # The same error again is no change: no event.
        assert not action_touch(action_id=action.pk, error=Action.objects.get(pk=action.pk).error)
        assert len(heard) == 1
    finally:
        entity_changed.disconnect(listener)


def test_a_signed_action_whose_submit_task_never_ran_is_submitted_by_reconciliation(
    rpc, user, application, settings
):
    action = signed(user, application)
    rpc.results["eth_sendUserOperation"] = action.user_op_hash
    assert actions_reconcile_pending() == {}  # within the grace period: the task's job
    Action.objects.filter(pk=action.pk).update(signed_at=timezone.now() - timedelta(minutes=2))
    assert actions_reconcile_pending() == {"pending": 1}
    assert Action.objects.get(pk=action.pk).status == S.BROADCAST


def test_card_actions_without_a_session_do_not_starve_user_operations(
    rpc, user, application, settings
):
    settings.ACTIONS_RECONCILE_BATCH_SIZE = 3
    stuck = []
    for _ in range(5):
        card = make_action(
            user=user,
            application=application,
            type="cardFreeze",
            user_op=None,
            params={"card_id": "c1", "frozen": True, "last4": "1234"},
        )
        for step in (S.SIGNED, S.SUBMITTED):
            transition(lifecycle=ACTION_LIFECYCLE, pk=card.pk, to=step, actor=Actor.worker())
        stuck.append(card.pk)
    op = signed(user, application)
    for step in (S.SUBMITTED, S.BROADCAST):
        transition(lifecycle=ACTION_LIFECYCLE, pk=op.pk, to=step, actor=Actor.worker())
    # The op was created last, so it sorts last among the never-reconciled.
    rpc.results["eth_getUserOperationReceipt"] = receipt()
    for _ in range(2):
        actions_reconcile_pending()
    assert Action.objects.get(pk=op.pk).status == S.EXECUTED
    cards = Action.objects.filter(pk__in=stuck)
    assert all(c.last_reconciled_at for c in cards)
    assert {c.last_reconcile_error for c in cards} == {
        "no live Gnosis Pay session for the card's Safe: a new signature is needed"
    }
    assert {c.status for c in cards} == {"submitted"}


def test_staff_mark_failed_needs_a_note_and_records_the_staff_user(
    rpc, user, application, staff_user
):
    action = signed(user, application)
    with pytest.raises(ActionResolutionError, match="A note is required"):
        action_mark_failed(action_id=action.pk, staff_user=staff_user, note="  ")
    action = action_mark_failed(
        action_id=action.pk, staff_user=staff_user, note="user asked to cancel"
    )
    assert action.status == S.FAILED
    assert action.error == "marked failed by staff: user asked to cancel"
    last = action.history.last()
    assert (last.from_status, last.actor_kind, last.actor_user) == ("signed", "staff", staff_user)
    with pytest.raises(ActionResolutionError, match="it is failed"):
        action_mark_failed(action_id=action.pk, staff_user=staff_user, note="again")


def test_staff_resend_delivers_the_same_op_now_and_is_audited(rpc, user, application, staff_user):
    action = signed(user, application)
    rpc.mode = "http500"
    action_submit(action_id=action.pk)
    rpc.mode = "result"
    rpc.results["eth_sendUserOperation"] = action.user_op_hash
    outcome = action_resend(action_id=action.pk, staff_user=staff_user, note="bundler is back")
    assert outcome == ReconcileOutcome.PENDING
    action.refresh_from_db()
    assert action.status == S.BROADCAST and action.submit_attempts == 2
    rows = list(action.history.order_by("timestamp", "id"))
    audit = [r for r in rows if r.detail == "re-send requested by staff: bundler is back"]
    assert len(audit) == 1 and audit[0].actor_user == staff_user
    assert rows[-1].status == "broadcast" and rows[-1].actor_user == staff_user
    with pytest.raises(ActionResolutionError, match="A note is required"):
        action_resend(action_id=action.pk, staff_user=staff_user, note="")


def test_the_status_tool_lists_transitions_only(rpc, user, application, staff_user, client):
    from actions.execution.selectors import action_with_history
    from actions.serializers import ActionStatusSerializer

    action = signed(user, application)
    rpc.mode = "http500"
    action_submit(action_id=action.pk)
    rpc.mode = "result"
    action_resend(action_id=action.pk, staff_user=staff_user, note="try again")
    body = ActionStatusSerializer(action_with_history(action_id=action.pk)).data
    assert [h["status"] for h in body["status_history"]] == ["proposed", "signed", "submitted"]
