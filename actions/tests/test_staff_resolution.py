"""Staff end in-flight actions: "Mark failed" and "Re-send", in the admin (an intermediate page
with a required note) and on the staff timeline, behind the `actions.resolve_action` permission.

A scripted JSON-RPC server plays the bundler and the chain where a re-send needs them."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.services import action_submit
from actions.tests.factories import make_action
from core.lifecycle import Actor, transition

S = ActionStatus
CHANGELIST = "/admin/actions/action/"
pytestmark = pytest.mark.django_db


def _staff(make_user, username: str, *codenames: str):
    """Staff, not superuser, with only the named permissions of the actions app."""
    member = make_user(username, is_staff=True)
    member.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="actions", codename__in=codenames)
    )
    return member


@pytest.fixture
def resolver(make_user):
    member = _staff(make_user, "rita", "view_action", "resolve_action")
    assert member.has_perm("actions.resolve_action") and not member.is_superuser
    return member


@pytest.fixture
def resolver_client(client, resolver):
    client.force_login(resolver)
    return client


@pytest.fixture
def viewer(make_user):
    member = _staff(make_user, "vic", "view_action", "change_action")
    assert not member.has_perm("actions.resolve_action")
    return member


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def _advance(action, *steps):
    for step in steps:
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    return Action.objects.get(pk=action.pk)


def _in_flight(user, application, *steps) -> Action:
    return _advance(make_action(user=user, application=application), S.SIGNED, *steps)


def _rows(action) -> list:
    return list(Action.objects.get(pk=action.pk).history.order_by("timestamp", "id"))


def _resolve_url(kind: str) -> str:
    return f"/admin/actions/action/resolve/{kind}/"


# --- The admin ------------------------------------------------------------------------------


def test_mark_failed_through_the_admin_intermediate_page_is_audited(
    resolver_client, resolver, user, application
):
    action = _in_flight(user, application, S.SUBMITTED)

    listing = resolver_client.get(CHANGELIST)
    assert 'value="mark_failed"' in listing.text and 'value="resend"' in listing.text

    chosen = resolver_client.post(
        CHANGELIST, {"action": "mark_failed", "_selected_action": [str(action.pk)]}
    )
    assert chosen.status_code == 302
    assert chosen["Location"] == f"{_resolve_url('mark-failed')}?ids={action.pk}"
    assert Action.objects.get(pk=action.pk).status == S.SUBMITTED  # nothing yet: a note first

    page = resolver_client.get(chosen["Location"])
    assert page.status_code == 200
    assert str(action.pk) in page.text and "submitted" in page.text
    assert 'name="note"' in page.text and "csrfmiddlewaretoken" in page.text
    assert f'name="ids" value="{action.pk}"' in page.text

    done = resolver_client.post(
        _resolve_url("mark-failed"),
        {"ids": [str(action.pk)], "note": "user asked support to cancel; nonce reused"},
        follow=True,
    )
    assert done.redirect_chain[-1][0] == f"/admin/actions/action/{action.pk}/change/"
    assert f"Action {action.pk}: marked failed." in done.text

    action.refresh_from_db()
    assert action.status == S.FAILED
    assert action.error == "marked failed by staff: user asked support to cancel; nonce reused"
    last = _rows(action)[-1]
    assert (last.from_status, last.status) == ("submitted", "failed")
    assert last.actor_kind == "staff" and last.actor_user == resolver
    assert "user asked support to cancel; nonce reused" in last.detail


def test_a_blank_note_is_refused_and_nothing_changes(resolver_client, user, application):
    action = _in_flight(user, application, S.SUBMITTED, S.BROADCAST)
    before = _rows(action)
    for kind in ("mark-failed", "resend"):
        page = resolver_client.post(_resolve_url(kind), {"ids": [str(action.pk)], "note": "   "})
        assert page.status_code == 200  # the page again, with the error
        assert "This field is required." in page.text
        assert f'name="ids" value="{action.pk}"' in page.text  # the selection is kept
    action.refresh_from_db()
    assert action.status == S.BROADCAST and action.error is None
    assert _rows(action) == before


def test_each_selected_action_is_reported_and_ended_ones_are_refused(
    resolver_client, resolver, user, application
):
    live = _in_flight(user, application)
    ended = _advance(make_action(user=user, application=application), S.REJECTED)
    chosen = resolver_client.post(
        CHANGELIST,
        {"action": "mark_failed", "_selected_action": [str(live.pk), str(ended.pk)]},
    )
    page = resolver_client.get(chosen["Location"])
    assert str(live.pk) in page.text and str(ended.pk) in page.text
    assert "not in flight: will be refused" in page.text

    done = resolver_client.post(
        _resolve_url("mark-failed"),
        {"ids": [str(live.pk), str(ended.pk)], "note": "stuck signed, task lost"},
        follow=True,
    )
    assert done.redirect_chain[-1][0] == CHANGELIST
    assert f"Action {live.pk}: marked failed." in done.text
    assert (
        f"Action {ended.pk}: not done: Only in-flight actions can be marked failed; it is rejected"
        in done.text
    )
    assert Action.objects.get(pk=live.pk).status == S.FAILED
    assert _rows(live)[-1].actor_user == resolver
    assert Action.objects.get(pk=ended.pk).status == S.REJECTED
    assert [r.status for r in _rows(ended)] == ["proposed", "rejected"]


def test_resend_through_the_admin_delivers_the_same_op_and_is_audited(
    rpc, resolver_client, resolver, user, application
):
    action = _in_flight(user, application)
    rpc.mode = "http500"
    action_submit(action_id=action.pk)  # a transient failure: stays submitted
    rpc.mode = "result"
    rpc.results["eth_sendUserOperation"] = Action.objects.get(pk=action.pk).user_op_hash

    chosen = resolver_client.post(
        CHANGELIST, {"action": "resend", "_selected_action": [str(action.pk)]}
    )
    assert chosen["Location"] == f"{_resolve_url('resend')}?ids={action.pk}"
    done = resolver_client.post(
        _resolve_url("resend"), {"ids": [str(action.pk)], "note": "bundler is back"}, follow=True
    )
    assert f"Action {action.pk}: re-sent (pending); it is now broadcast." in done.text

    action.refresh_from_db()
    assert action.status == S.BROADCAST and action.submit_attempts == 2
    rows = _rows(action)
    audit = [r for r in rows if r.detail == "re-send requested by staff: bundler is back"]
    assert len(audit) == 1
    assert (audit[0].from_status, audit[0].status) == ("submitted", "submitted")
    assert audit[0].actor_kind == "staff" and audit[0].actor_user == resolver
    assert rows[-1].status == "broadcast" and rows[-1].actor_user == resolver


def test_a_selection_too_large_for_one_page_is_refused(
    resolver_client, user, application, monkeypatch
):
    monkeypatch.setattr("actions.admin.MAX_RESOLVE", 2)
    picked = [_in_flight(user, application) for _ in range(3)]
    response = resolver_client.post(
        CHANGELIST,
        {"action": "mark_failed", "_selected_action": [str(a.pk) for a in picked]},
        follow=True,
    )
    assert "Select at most 2 actions to resolve at once" in response.text
    assert {a.status for a in Action.objects.filter(pk__in=[a.pk for a in picked])} == {S.SIGNED}


def test_the_change_page_links_to_the_resolution_pages_for_in_flight_actions(
    resolver_client, user, application
):
    live = _in_flight(user, application)
    page = resolver_client.get(f"/admin/actions/action/{live.pk}/change/")
    assert f'href="{_resolve_url("mark-failed")}?ids={live.pk}"' in page.text
    assert f'href="{_resolve_url("resend")}?ids={live.pk}"' in page.text
    assert "Submit attempts" in page.text and "Next submit at" in page.text

    ended = _advance(make_action(user=user, application=application), S.EXPIRED)
    page = resolver_client.get(f"/admin/actions/action/{ended.pk}/change/")
    assert page.status_code == 200
    assert "/resolve/" not in page.text


def test_a_superuser_sees_the_resolution_actions(staff_client, user, application):
    _in_flight(user, application)  # an empty changelist shows no action dropdown at all
    listing = staff_client.get(CHANGELIST)
    assert 'value="mark_failed"' in listing.text and 'value="resend"' in listing.text


def test_staff_without_the_permission_cannot_resolve_anywhere(viewer_client, user, application):
    action = _in_flight(user, application, S.SUBMITTED)
    before = _rows(action)

    listing = viewer_client.get(CHANGELIST)
    assert listing.status_code == 200 and str(action.pk) in listing.text
    assert 'value="reconcile_now"' not in listing.text  # that needs actions.reconcile_action
    assert 'value="mark_failed"' not in listing.text and 'value="resend"' not in listing.text

    # Posting the action by hand does not reach the note page.
    chosen = viewer_client.post(
        CHANGELIST, {"action": "mark_failed", "_selected_action": [str(action.pk)]}
    )
    assert "/resolve/" not in chosen.get("Location", "")

    # The admin's own page checks the permission, not only the action list.
    for kind in ("mark-failed", "resend"):
        assert viewer_client.get(f"{_resolve_url(kind)}?ids={action.pk}").status_code == 403
        refused = viewer_client.post(
            _resolve_url(kind), {"ids": [str(action.pk)], "note": "let me"}
        )
        assert refused.status_code == 403
    page = viewer_client.get(f"/admin/actions/action/{action.pk}/change/")
    assert page.status_code == 200 and "/resolve/" not in page.text

    # The staff timeline: no forms, and its POST views refuse.
    timeline = viewer_client.get(f"/staff/actions/{action.pk}/")
    assert timeline.status_code == 200 and 'name="note"' not in timeline.text
    for suffix in ("mark-failed", "resend"):
        refused = viewer_client.post(f"/staff/actions/{action.pk}/{suffix}", {"note": "let me"})
        assert refused.status_code == 403

    action.refresh_from_db()
    assert action.status == S.SUBMITTED and action.error is None
    assert _rows(action) == before


# --- The staff timeline ---------------------------------------------------------------------


def test_resend_from_the_staff_timeline_records_the_audit_row(
    rpc, resolver_client, resolver, user, application
):
    action = _in_flight(user, application)
    rpc.mode = "http500"
    action_submit(action_id=action.pk)
    rpc.mode = "result"
    action.refresh_from_db()
    rpc.results["eth_sendUserOperation"] = action.user_op_hash

    page = resolver_client.get(f"/staff/actions/{action.pk}/")
    resend_url = f"/staff/actions/{action.pk}/resend"
    assert f'action="{resend_url}"' in page.text
    assert f'action="/staff/actions/{action.pk}/mark-failed"' in page.text
    assert page.text.count('name="note"') == 2 and page.text.count("required") >= 2
    assert "Submit attempts</dt><dd>1</dd>" in page.text

    response = resolver_client.post(resend_url, {"note": "bundler restarted"})
    assert response.status_code == 302
    assert response["Location"] == f"/staff/actions/{action.pk}/"

    action.refresh_from_db()
    assert action.status == S.BROADCAST and action.submit_attempts == 2
    rows = _rows(action)
    audit = [r for r in rows if r.detail == "re-send requested by staff: bundler restarted"]
    assert len(audit) == 1
    assert audit[0].actor_kind == "staff" and audit[0].actor_user == resolver
    assert rows[-1].status == "broadcast" and rows[-1].actor_user == resolver

    page = resolver_client.get(response["Location"])
    assert f"Action {action.pk}: re-sent (pending); it is now broadcast." in page.text
    assert "Submit attempts</dt><dd>2</dd>" in page.text
    assert "re-send requested by staff: bundler restarted" in page.text


def test_mark_failed_from_the_staff_timeline_needs_a_note(
    resolver_client, resolver, user, application
):
    action = _in_flight(user, application, S.SUBMITTED, S.BROADCAST)
    url = f"/staff/actions/{action.pk}/mark-failed"
    before = _rows(action)

    refused = resolver_client.post(url, {"note": "  "}, follow=True)
    assert "Not marked failed: A note is required" in refused.text
    assert Action.objects.get(pk=action.pk).status == S.BROADCAST
    assert _rows(action) == before
    for hostile in ("a\x00b", "x" * 1001):  # PostgreSQL text holds no NUL; a bounded note
        refused = resolver_client.post(url, {"note": hostile}, follow=True)
        assert refused.status_code == 200 and "Not marked failed: the note" in refused.text
        assert Action.objects.get(pk=action.pk).status == S.BROADCAST
        assert _rows(action) == before

    assert resolver_client.get(url).status_code == 405  # POST only
    done = resolver_client.post(url, {"note": "op dropped by the bundler, user informed"})
    assert done.status_code == 302 and done["Location"] == f"/staff/actions/{action.pk}/"
    action.refresh_from_db()
    assert action.status == S.FAILED
    assert action.error == "marked failed by staff: op dropped by the bundler, user informed"
    last = _rows(action)[-1]
    assert (last.from_status, last.status, last.actor_kind) == ("broadcast", "failed", "staff")
    assert last.actor_user == resolver and "op dropped by the bundler" in last.detail

    # Now terminal: the page offers nothing, and a second attempt is refused with the reason.
    page = resolver_client.get(f"/staff/actions/{action.pk}/")
    assert 'name="note"' not in page.text
    again = resolver_client.post(url, {"note": "again"}, follow=True)
    assert "Only in-flight actions can be marked failed; it is failed" in again.text
    assert len(_rows(action)) == len(before) + 1


@pytest.mark.parametrize(
    "steps",
    [
        (S.SIGNED, S.SUBMITTED, S.FAILED),
        (S.REJECTED,),
        (S.EXPIRED,),
        (),  # proposed: not terminal, but nothing is signed yet, so nothing to resolve
    ],
)
def test_actions_not_in_flight_show_no_resolve_forms(resolver_client, user, application, steps):
    action = _advance(make_action(user=user, application=application), *steps)
    page = resolver_client.get(f"/staff/actions/{action.pk}/")
    assert page.status_code == 200
    assert 'name="note"' not in page.text
    assert "/resend" not in page.text and "/mark-failed" not in page.text


def test_a_terminal_poll_removes_the_resolve_forms(resolver_client, user, application):
    action = _in_flight(user, application, S.SUBMITTED)
    assert 'id="resolve"' in resolver_client.get(f"/staff/actions/{action.pk}/").text
    _advance(action, S.FAILED)
    partial = resolver_client.get(
        f"/staff/actions/{action.pk}/", {"u": "old"}, HTTP_HX_REQUEST="true"
    )
    assert partial.status_code == 286
    assert '<section id="resolve" hx-swap-oob="true" hidden></section>' in partial.text
