"""Every delivery reaches a true end: a delivery someone else moved first is a no-op that
never stops the worker's batch, and visible changes without a transition are events."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from chain.stack import free_port
from dev.testing import history_statuses
from messaging import worker
from messaging.models import D, Delivery
from messaging.providers.x import NotSent
from messaging.services import delivery_cancel
from messaging.worker import deliveries_claim, deliveries_process_due, delivery_attempt


class Unreachable:
    """A provider adapter whose connection is refused (nothing sent), after `act`."""

    def __init__(self, act):
        self.act = act

    def connect(self):
        self.act()
        raise NotSent("could not connect")


def _first_call(monkeypatch, name, replacement):
    """Replace worker.<name> for its first call only."""
    real = getattr(worker, name)
    calls = []

    def once(*args, **kwargs):
        calls.append(1)
        return replacement(*args, **kwargs) if len(calls) == 1 else real(*args, **kwargs)

    monkeypatch.setattr(worker, name, once)


@pytest.mark.parametrize("failure", ["credential-missing", "unreachable-at-the-last-attempt"])
def test_a_batch_goes_on_when_the_sender_cancels_one_of_its_deliveries(
    x_server, queue, member, settings, monkeypatch, failure
):
    """The worker claimed both; while it was failing the first (nothing sent), the sender
    cancelled it. The worker's `failed` loses to `cancelled` and the second is still sent."""
    cancelled, other = queue("first"), queue("second")

    def sender_cancels():
        delivery_cancel(delivery=Delivery.objects.get(pk=cancelled.pk), user=member)

    if failure == "credential-missing":

        def credential(account):
            sender_cancels()
            raise worker.CredentialMissing("credential env:X is not configured")

        _first_call(monkeypatch, "resolve_credential", credential)
    else:
        settings.DM_MAX_CONNECT_ATTEMPTS = 1
        _first_call(monkeypatch, "provider_for", lambda account: Unreachable(sender_cancels))

    assert deliveries_process_due(worker_id="w1") == {"raced": 1, D.SENT: 1}
    cancelled.refresh_from_db()
    assert (cancelled.status, cancelled.reason, cancelled.attempts) == (D.CANCELLED, None, 0)
    assert history_statuses(cancelled) == ["queued", "claimed", "cancelled"]
    assert Delivery.objects.get(pk=other.pk).status == D.SENT
    assert len(x_server.requests) == 1


def test_a_connect_retry_by_a_worker_that_lost_its_claim_writes_nothing(
    queue, settings, monkeypatch
):
    """w1's connection attempt outlived its lease; w2 took the claim over. w1's retry
    bookkeeping (attempts, backoff, clearing the lease) would clobber w2's claim: it is a
    no-op instead."""
    delivery = queue()
    assert deliveries_claim(worker_id="w1") == [delivery.pk]

    def lease_lapses_and_w2_takes_over():
        Delivery.objects.filter(pk=delivery.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1)
        )
        assert deliveries_claim(worker_id="w2") == [delivery.pk]

    _first_call(
        monkeypatch, "provider_for", lambda account: Unreachable(lease_lapses_and_w2_takes_over)
    )
    assert delivery_attempt(delivery_id=delivery.pk, worker_id="w1") == "raced"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.lease_owner, delivery.attempts, delivery.last_error) == (
        D.CLAIMED,
        "w2",
        0,
        "",
    )
    assert delivery.lease_expires_at > timezone.now()


def test_a_connect_retry_bumps_updated_at_and_is_published(
    queue, settings, published, django_capture_on_commit_callbacks
):
    settings.X_API_BASE_URL = f"http://127.0.0.1:{free_port()}"  # nobody listens
    settings.DM_PROVIDER_TIMEOUT_SECONDS = 1.0
    delivery = queue()
    assert deliveries_claim(worker_id="w1") == [delivery.pk]
    before = Delivery.objects.get(pk=delivery.pk)
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert delivery_attempt(delivery_id=delivery.pk, worker_id="w1") == "retry"
    after = Delivery.objects.get(pk=delivery.pk)
    assert (after.status, after.attempts, after.lease_owner) == (D.CLAIMED, 1, "")
    assert "could not connect" in after.last_error
    assert after.updated_at > before.updated_at
    assert published == [{"lifecycle": "delivery", "id": str(delivery.pk), "status": "claimed"}]
    assert history_statuses(after) == ["queued", "claimed"]  # not a transition


def test_taking_over_a_lapsed_claim_bumps_updated_at_and_is_published(
    queue, published, django_capture_on_commit_callbacks
):
    delivery = queue()
    assert deliveries_claim(worker_id="w1") == [delivery.pk]
    Delivery.objects.filter(pk=delivery.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    before = Delivery.objects.get(pk=delivery.pk)
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert deliveries_claim(worker_id="w2") == [delivery.pk]
    after = Delivery.objects.get(pk=delivery.pk)
    assert after.lease_owner == "w2" and after.updated_at > before.updated_at
    assert published == [{"lifecycle": "delivery", "id": str(delivery.pk), "status": "claimed"}]
    assert history_statuses(after) == ["queued", "claimed"]
