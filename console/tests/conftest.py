"""Stuck work of all three apps, made through their services (factories of each app; the
social account and deliveries are messaging's own fixtures)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.tests.factories import make_action
from core.lifecycle import Actor, transition
from messaging.models import D
from messaging.tests.conftest import (  # noqa: F401 - shared fixtures
    make_delivery,
    member,
    social_account,
    workspace,
)
from operations.models import Operation
from operations.tests.factories import fund, submit_operation

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
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
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
    transition(
        lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=ActionStatus.SIGNED, actor=Actor.worker()
    )
    transition(
        lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=ActionStatus.SUBMITTED, actor=Actor.worker()
    )
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.FAILED,
        actor=Actor.worker(),
        updates={"tx_hash": TX_HASH, "block_number": 7, "error": REVERT},
    )
    return Action.objects.get(pk=action.pk)


@pytest.fixture
def unknown_delivery(make_delivery):  # noqa: F811 - the imported fixture
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
    fund(user)

    def make(category: str = "sensitive") -> Operation:
        return submit_operation(owner=user, category=category)

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
