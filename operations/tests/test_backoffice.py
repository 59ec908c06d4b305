"""Admin for operations and wallets, the HTMX review queue, the live timeline."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit
from uuid import uuid4

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from operations.models import FINISHED_STATES, Operation, State
from operations.selectors import REVIEW_PAGE_SIZE
from operations.tests.factories import fund, make_dispatch_unknown, submit_operation


@pytest.fixture
def make_op(user):
    fund(user)

    def make(category="writing") -> Operation:
        return submit_operation(owner=user, category=category)

    return make


def test_the_finished_states_are_the_lifecycles_ended_ones():
    # The partial indexes of open operations (operation_open_updated, _created) leave these
    # out: a state that ends must be among them, or its rows would stay in those indexes.
    assert set(FINISHED_STATES) == Operation.lifecycle.terminal


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


def _queue_ids(page) -> list[str]:
    return re.findall(r'id="review-([0-9a-f-]{36})"', page.text)


def _next(page) -> str | None:
    found = re.search(r'id="review-next" href="([^"]+)"', page.text)
    return html.unescape(found[1]) if found else None


def test_the_review_queue_pages_oldest_first_and_a_later_page_costs_what_the_first_does(
    staff_client, make_op, user
):
    fund(user, "1000")  # 45 holds
    ops = [make_op(category="sensitive") for _ in range(45)]
    # Two created at the same instant: the id orders them, neither is skipped nor repeated.
    Operation.objects.filter(pk=ops[20].pk).update(created_at=ops[19].created_at)
    expected = [
        str(pk)
        for pk in Operation.objects.filter(state=State.NEEDS_REVIEW)
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
    ]
    seen, counts, url = [], [], "/staff/operations/review/"
    while url:
        with CaptureQueriesContext(connection) as queries:
            page = staff_client.get(url)
        assert page.status_code == 200
        assert "45 waiting" in page.text
        counts.append(len(queries))
        seen.append(_queue_ids(page))
        url = _next(page)
    assert [len(ids) for ids in seen] == [REVIEW_PAGE_SIZE, REVIEW_PAGE_SIZE, 5]
    assert [i for ids in seen for i in ids] == expected
    assert len(set(counts)) == 1, counts  # the third page reads what the first does


def test_a_made_up_queue_position_is_a_400(staff_client, make_op):
    make_op(category="sensitive")
    for after in ("nonsense", "2026-01-01T00:00:00~not-a-uuid", f"2026-01-01T00:00:00~{uuid4()}"):
        response = staff_client.get("/staff/operations/review/", {"after": after})
        assert response.status_code == 400, after
        assert "not a review-queue position" in response.text


def test_a_decision_on_a_later_page_stays_on_that_page(staff_client, make_op):
    ops = [make_op(category="sensitive") for _ in range(REVIEW_PAGE_SIZE + 3)]
    first = staff_client.get("/staff/operations/review/")
    after = parse_qs(urlsplit(_next(first)).query)["after"][0]
    second = staff_client.get("/staff/operations/review/", {"after": after})
    assert _queue_ids(second) == [str(op.pk) for op in ops[REVIEW_PAGE_SIZE:]]
    decided = ops[REVIEW_PAGE_SIZE]
    partial = staff_client.post(
        f"/staff/operations/review/{decided.pk}/",
        {"decision": "approve", "note": "checked", "after": after},
        HTTP_HX_REQUEST="true",
    )
    assert _queue_ids(partial) == [str(op.pk) for op in ops[REVIEW_PAGE_SIZE + 1 :]]
    assert Operation.objects.get(pk=decided.pk).state == State.QUEUED
    without_js = staff_client.post(
        f"/staff/operations/review/{ops[-1].pk}/",
        {"decision": "reject", "note": "no", "after": after},
    )
    assert without_js.status_code == 302 and "after=" in without_js["Location"]


def test_a_decision_with_a_made_up_position_lands_on_the_first_page(staff_client, make_op):
    """The decision is saved whatever the form's cursor says; a made-up one (a tampered form)
    sends the browser back to the first page, not to a 400 after the fact."""
    op = make_op(category="sensitive")
    for htmx in (False, True):
        extra = {"HTTP_HX_REQUEST": "true"} if htmx else {}
        response = staff_client.post(
            f"/staff/operations/review/{op.pk}/",
            {"decision": "reject", "note": "no", "after": "2026-01-01T00:00:00~nope"},
            **extra,
        )
        if htmx:
            assert response.status_code == 200
        else:
            assert response.status_code == 302
            assert response["Location"] == "/staff/operations/review/"
            assert staff_client.get(response["Location"]).status_code == 200
    assert Operation.objects.get(pk=op.pk).state == State.CANCELLED
