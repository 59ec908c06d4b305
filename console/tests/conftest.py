"""Stuck work of all three apps, made through their services (factories of each app)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from actions.models import Action, ActionStatus
from actions.services.transitions import action_transition
from actions.tests.factories import make_action
from core.lifecycle import Actor
from messaging.models import D, Delivery, Membership, Provider, Role, SocialAccount, Workspace
from messaging.services import delivery_send, delivery_transition
from operations import billing
from operations.models import Operation
from operations.services import operation_submit

TX_HASH = "0x" + "ab" * 32


@pytest.fixture(autouse=True)
def fresh_summaries(settings):
    """Counts and charts computed on every load: each test reads its own rows."""
    settings.CONSOLE_SUMMARY_CACHE_SECONDS = 0


REVERT = (
    "UserOperation reverted with reason: ERC20: transfer amount exceeds balance "
    "(a very long reason that the admin used to cut at sixty characters, kept in full here)"
)


@pytest.fixture
def stuck_action(user, application):
    """Signed 20 minutes ago and still broadcast: stuck in flight."""
    action = make_action(user=user, application=application)
    signed = timezone.now() - timedelta(minutes=20)
    for to in (ActionStatus.SIGNED, ActionStatus.SUBMITTED, ActionStatus.BROADCAST):
        action_transition(
            action_id=action.pk,
            to=to,
            actor=Actor.worker(),
            updates={"signed_at": signed} if to == ActionStatus.SIGNED else None,
        )
    Action.objects.filter(pk=action.pk).update(last_reconcile_error="bundler timed out")
    return Action.objects.get(pk=action.pk)


@pytest.fixture
def failed_action(user, application):
    """Reverted on chain a moment ago, with its tx hash."""
    action = make_action(user=user, application=application)
    action_transition(action_id=action.pk, to=ActionStatus.SIGNED, actor=Actor.worker())
    action_transition(action_id=action.pk, to=ActionStatus.SUBMITTED, actor=Actor.worker())
    action_transition(
        action_id=action.pk,
        to=ActionStatus.FAILED,
        actor=Actor.worker(),
        updates={"tx_hash": TX_HASH, "block_number": 7, "error": REVERT},
    )
    return Action.objects.get(pk=action.pk)


@pytest.fixture
def social_account(db, user, monkeypatch):
    monkeypatch.setenv("PICNIC_TEST_X_TOKEN", "x-token")
    workspace = Workspace.objects.create(name="Acme")
    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
    return SocialAccount.objects.create(
        workspace=workspace,
        provider=Provider.X,
        handle="acme",
        credential_ref="env:PICNIC_TEST_X_TOKEN",
    )


@pytest.fixture
def make_delivery(user, application, social_account):
    def make(*steps, **updates) -> Delivery:
        delivery = delivery_send(
            user=user,
            application=application,
            workspace_id=social_account.workspace_id,
            social_account_id=social_account.pk,
            recipient_id="55",
            text="hello",
            idempotency_key=uuid.uuid4(),
        ).delivery
        for step in steps:
            delivery_transition(
                delivery_id=delivery.pk,
                to=step,
                actor=Actor.worker(),
                updates=updates.pop(step, None),
            )
        return Delivery.objects.get(pk=delivery.pk)

    return make


@pytest.fixture
def unknown_delivery(make_delivery):
    return make_delivery(
        D.CLAIMED,
        D.SENDING,
        D.UNKNOWN,
        unknown={
            "reason": "the X API timed out after the request left",
            "provider_message_id": None,
        },
    )


@pytest.fixture
def make_operation(user):
    billing.wallet_grant(owner=user, amount=Decimal("100"), note="test grant")

    def make(category: str = "sensitive") -> Operation:
        return operation_submit(
            owner=user, application=None, tool="text-gen", category=category, input_text="hello"
        )

    return make


@pytest.fixture
def review_operation(make_operation):
    return make_operation("sensitive")


@pytest.fixture
def stuck_all(stuck_action, failed_action, unknown_delivery, review_operation):
    return {
        "stuck_action": stuck_action,
        "failed_action": failed_action,
        "unknown_delivery": unknown_delivery,
        "review_operation": review_operation,
    }
