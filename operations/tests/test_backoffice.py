"""Admin for operations and wallets, the HTMX review queue, the live timeline."""

from __future__ import annotations

import pytest

from operations.models import Operation, State
from operations.tests.factories import fund, make_dispatch_unknown, submit_operation


@pytest.fixture
def make_op(user):
    fund(user)

    def make(category="writing") -> Operation:
        return submit_operation(owner=user, category=category)

    return make


def test_filters_for_work_that_needs_attention(staff_client, make_op):
    review = make_op(category="sensitive")
    reconciling = make_op()
    make_dispatch_unknown(reconciling)
    plain = make_op()
    page = staff_client.get("/admin/operations/operation/", {"attention": "needs_review"})
    assert str(review.pk) in page.text and str(plain.pk) not in page.text
    page = staff_client.get("/admin/operations/operation/", {"attention": "dispatch_unknown"})
    assert str(reconciling.pk) in page.text and str(review.pk) not in page.text
    page = staff_client.get("/admin/operations/operation/", {"attention": "reconciling"})
    assert str(reconciling.pk) in page.text


def test_the_wallet_admin_shows_the_ledger(staff_client, make_op, user):
    make_op()
    wallet = user.credit_wallet
    page = staff_client.get(f"/admin/operations/wallet/{wallet.pk}/change/")
    assert page.status_code == 200
    assert "grant" in page.text.lower() and "hold" in page.text.lower()


def test_the_review_queue_approves_with_htmx_and_records_the_staff_user(
    staff_client, staff_user, make_op
):
    op = make_op(category="sensitive")
    page = staff_client.get("/staff/operations/review/")
    assert str(op.pk) in page.text and 'hx-post="/staff/operations/review/' in page.text
    missing_note = staff_client.post(
        f"/staff/operations/review/{op.pk}/",
        {"decision": "approve", "note": ""},
        HTTP_HX_REQUEST="true",
    )
    assert "a note is required" in missing_note.text
    assert Operation.objects.get(pk=op.pk).state == State.NEEDS_REVIEW
    partial = staff_client.post(
        f"/staff/operations/review/{op.pk}/",
        {"decision": "approve", "note": "checked"},
        HTTP_HX_REQUEST="true",
    )
    assert partial.status_code == 200 and "<html" not in partial.text
    assert "Nothing waits for review." in partial.text
    op.refresh_from_db()
    assert op.state == State.QUEUED
    row = op.history.last()
    assert (row.actor_user, row.detail) == (staff_user, "approved by staff sam: checked")


def test_the_review_queue_works_without_javascript(staff_client, make_op):
    op = make_op(category="sensitive")
    response = staff_client.post(
        f"/staff/operations/review/{op.pk}/", {"decision": "reject", "note": "no"}
    )
    assert response.status_code == 302
    assert Operation.objects.get(pk=op.pk).state == State.CANCELLED


def test_a_staff_member_without_the_review_permission_cannot_decide(client, make_user, make_op):
    reviewer = make_user("viewer", is_staff=True)  # staff, not superuser: no review permission
    client.force_login(reviewer)
    op = make_op(category="sensitive")
    response = client.post(
        f"/staff/operations/review/{op.pk}/", {"decision": "approve", "note": "ok"}
    )
    assert response.status_code == 403
    assert Operation.objects.get(pk=op.pk).state == State.NEEDS_REVIEW
    assert not op.history.filter(actor_user=reviewer).exists()


def test_pause_and_resume_from_the_admin(staff_client, make_op):
    op = make_op()
    staff_client.post(
        "/admin/operations/operation/", {"action": "pause", "_selected_action": [str(op.pk)]}
    )
    assert Operation.objects.get(pk=op.pk).state == State.PAUSED
    staff_client.post(
        "/admin/operations/operation/", {"action": "resume", "_selected_action": [str(op.pk)]}
    )
    assert Operation.objects.get(pk=op.pk).state == State.QUEUED


def test_the_operation_timeline_polls_until_terminal(staff_client, make_op, staff_user):
    op = make_op(category="sensitive")
    page = staff_client.get(f"/staff/operations/{op.pk}/")
    assert (
        'data-status="needs_review"' in page.text
        and 'hx-trigger="sse:changed, every 2s"' in page.text
    )
    assert "review required by rule category:sensitive" in page.text
    from operations.decisions import operation_review_decide

    operation_review_decide(operation_id=op.pk, staff_user=staff_user, approve=False, note="no")
    partial = staff_client.get(f"/staff/operations/{op.pk}/", {"u": "old"}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 286 and 'data-status="cancelled"' in partial.text


def test_a_review_note_with_a_nul_or_too_long_is_refused_and_changes_nothing(staff_client, make_op):
    op = make_op(category="sensitive")
    rows = op.history.count()
    for note, said in (("ok\x00", "null characters are not allowed"), ("x" * 2001, "at most")):
        answer = staff_client.post(
            f"/staff/operations/review/{op.pk}/",
            {"decision": "approve", "note": note},
            HTTP_HX_REQUEST="true",
        )
        assert answer.status_code == 200 and said in answer.text
        op.refresh_from_db()
        assert op.state == State.NEEDS_REVIEW and op.history.count() == rows
