"""Admin for workspaces and deliveries, manual resolution of unknown, the live timeline."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from core.lifecycle import Actor
from messaging.models import D, Delivery
from messaging.selectors import deliveries_stuck
from messaging.services import delivery_transition


def test_the_delivery_list_filters_unknown_stuck_and_failed_reasons(staff_client, make_delivery):
    unknown = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    stuck = make_delivery(D.CLAIMED, D.SENDING)
    Delivery.objects.filter(pk=stuck.pk).update(
        lease_expires_at=timezone.now() - timedelta(minutes=1)
    )
    failed = make_delivery(
        D.CLAIMED, D.SENDING, D.FAILED, **{D.FAILED: {"reason": "Forbidden: blocked"}}
    )
    page = staff_client.get("/admin/messaging/delivery/", {"status__exact": "unknown"})
    assert str(unknown.pk) in page.text and str(stuck.pk) not in page.text
    page = staff_client.get("/admin/messaging/delivery/", {"stuck": "yes"})
    # `unknown` waits for staff: it is stuck too (see the test below).
    assert str(stuck.pk) in page.text and str(unknown.pk) in page.text
    assert str(failed.pk) not in page.text
    page = staff_client.get("/admin/messaging/delivery/")
    assert "Forbidden: blocked" in page.text  # offered as a reason filter
    page = staff_client.get("/admin/messaging/delivery/", {"reason": "Forbidden: blocked"})
    assert str(failed.pk) in page.text and str(unknown.pk) not in page.text


def test_stuck_is_everything_that_waits_for_staff_or_for_a_worker_that_is_not_coming(
    staff_client, make_delivery, settings
):
    settings.DM_LEASE_SECONDS = 30
    now = timezone.now()
    long_ago = now - timedelta(seconds=31)
    unknown = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)  # just now: waits for staff
    sending_lapsed = make_delivery(
        D.CLAIMED, D.SENDING, **{D.SENDING: {"lease_expires_at": now - timedelta(seconds=1)}}
    )
    claimed_lapsed = make_delivery(
        D.CLAIMED, **{D.CLAIMED: {"lease_expires_at": now - timedelta(seconds=1)}}
    )
    queued_overdue = make_delivery()
    retry_overdue = make_delivery(D.CLAIMED)  # a refused connection, retry long due
    Delivery.objects.filter(pk__in=[queued_overdue.pk, retry_overdue.pk]).update(
        next_attempt_at=long_ago
    )
    stuck = {unknown, sending_lapsed, claimed_lapsed, queued_overdue, retry_overdue}

    moving = {
        make_delivery(),  # queued just now
        make_delivery(D.CLAIMED, **{D.CLAIMED: {"lease_expires_at": now + timedelta(seconds=9)}}),
        make_delivery(
            D.CLAIMED, D.SENDING, **{D.SENDING: {"lease_expires_at": now + timedelta(seconds=9)}}
        ),
        make_delivery(D.CLAIMED, **{D.CLAIMED: {"next_attempt_at": now + timedelta(seconds=60)}}),
        make_delivery(D.CLAIMED, D.SENDING, D.SENT, **{D.SENT: {"provider_message_id": "1"}}),
        make_delivery(D.CLAIMED, D.SENDING, D.FAILED),
        make_delivery(D.CANCELLED),
    }
    assert set(deliveries_stuck(now)) == stuck
    page = staff_client.get("/admin/messaging/delivery/", {"stuck": "yes"})
    assert all(str(d.pk) in page.text for d in stuck)
    assert not any(str(d.pk) in page.text for d in moving)


def test_search_by_idempotency_key(staff_client, make_delivery):
    target, other = make_delivery(), make_delivery()
    page = staff_client.get("/admin/messaging/delivery/", {"q": str(target.idempotency_key)})
    assert str(target.pk) in page.text and str(other.pk) not in page.text


def test_staff_resolve_unknown_as_sent_with_a_required_note(
    staff_client, staff_user, make_delivery
):
    delivery = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    url = f"/admin/messaging/delivery/{delivery.pk}/resolve/"
    assert "Resolve unknown delivery" in staff_client.get(url).text
    no_note = staff_client.post(url, {"outcome": "sent", "provider_message_id": "1799", "note": ""})
    assert no_note.status_code == 200 and "This field is required" in no_note.text
    no_id = staff_client.post(url, {"outcome": "sent", "note": "seen in X inbox"})
    assert "needs the provider message id" in no_id.text
    assert Delivery.objects.get(pk=delivery.pk).status == D.UNKNOWN

    done = staff_client.post(
        url, {"outcome": "sent", "provider_message_id": "1799", "note": "seen in X inbox"}
    )
    assert done.status_code == 302
    delivery.refresh_from_db()
    assert (delivery.status, delivery.provider_message_id) == (D.SENT, "1799")
    row = delivery.history.last()
    assert (row.actor_kind, row.actor_user) == ("staff", staff_user)
    assert row.detail == "resolved by staff sam: seen in X inbox"


def test_staff_resolve_unknown_as_failed(staff_client, make_delivery):
    delivery = make_delivery(D.CLAIMED, D.SENDING, D.UNKNOWN)
    staff_client.post(
        f"/admin/messaging/delivery/{delivery.pk}/resolve/",
        {"outcome": "failed", "note": "not in the conversation on X"},
    )
    delivery.refresh_from_db()
    assert delivery.status == D.FAILED
    assert delivery.reason == "resolved by staff: not in the conversation on X"


def test_only_unknown_deliveries_can_be_resolved(staff_client, make_delivery):
    delivery = make_delivery()
    response = staff_client.post(
        f"/admin/messaging/delivery/{delivery.pk}/resolve/",
        {"outcome": "failed", "note": "n/a"},
        follow=True,
    )
    assert "Not resolved: the delivery is queued" in response.text
    assert Delivery.objects.get(pk=delivery.pk).status == D.QUEUED


def test_cancel_from_the_admin(staff_client, staff_user, make_delivery):
    queued, sending = make_delivery(), make_delivery(D.CLAIMED, D.SENDING)
    response = staff_client.post(
        "/admin/messaging/delivery/",
        {"action": "cancel_selected", "_selected_action": [str(queued.pk), str(sending.pk)]},
        follow=True,
    )
    assert "Cancelled 1." in response.text
    assert f"{sending.pk} is sending" in response.text
    queued.refresh_from_db()
    assert queued.status == D.CANCELLED
    assert queued.history.last().actor_user == staff_user


def test_the_delivery_timeline_polls_until_terminal(staff_client, make_delivery):
    delivery = make_delivery(D.CLAIMED)
    page = staff_client.get(f"/staff/deliveries/{delivery.pk}/")
    assert (
        'data-status="claimed"' in page.text and 'hx-trigger="sse:changed, every 2s"' in page.text
    )
    version = delivery.updated_at.isoformat()
    assert (
        staff_client.get(
            f"/staff/deliveries/{delivery.pk}/", {"u": version}, HTTP_HX_REQUEST="true"
        ).status_code
        == 204
    )
    delivery_transition(delivery_id=delivery.pk, to=D.CANCELLED, actor=Actor.system())
    partial = staff_client.get(
        f"/staff/deliveries/{delivery.pk}/", {"u": version}, HTTP_HX_REQUEST="true"
    )
    assert partial.status_code == 286 and 'data-status="cancelled"' in partial.text


def test_the_workspace_admin_never_shows_a_secret(staff_client, workspace, social_account):
    page = staff_client.get(f"/admin/messaging/workspace/{workspace.pk}/change/")
    assert page.status_code == 200
    assert "env:PICNIC_TEST_X_TOKEN" in page.text
    assert "x-user-token-for-tests" not in page.text
