"""Django admin for actions and the staff HTMX timeline page."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from actions.accounts.models import ACCOUNT_CHANGE_LIFECYCLE, AccountChangeKind
from actions.accounts.models import AccountChangeStatus as C
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.permissions.models import SPEND_PERMISSION_LIFECYCLE
from actions.permissions.models import SpendPermissionStatus as P
from actions.tests.factories import make_action, make_offline_wallet, make_permission, user_op
from core.chains import with_endpoints
from core.lifecycle import Actor, create, transition
from dev.testing import ScriptedServer

S = ActionStatus
TX = "0x" + "cd" * 32


def _advance(action, *steps):
    for step in steps:
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())


def test_the_changelist_shows_actions_and_filters_stuck_work(
    staff_client, user, application, settings
):
    settings.ACTIONS_STUCK_AFTER_MINUTES = 10
    stuck = make_action(user=user, application=application)
    _advance(stuck, S.SIGNED, S.SUBMITTED)
    Action.objects.filter(pk=stuck.pk).update(signed_at=timezone.now() - timedelta(minutes=11))
    moving = make_action(user=user, application=application)
    _advance(moving, S.SIGNED, S.SUBMITTED, S.BROADCAST)
    # Stuck is measured from the signature: a recent change does not make it less stuck.
    old_but_ended = make_action(user=user, application=application)
    _advance(old_but_ended, S.SIGNED, S.SUBMITTED, S.FAILED)
    Action.objects.filter(pk=old_but_ended.pk).update(
        signed_at=timezone.now() - timedelta(minutes=30)
    )
    response = staff_client.get("/admin/actions/action/")
    assert response.status_code == 200
    assert str(stuck.pk) in response.text and str(moving.pk) in response.text
    response = staff_client.get("/admin/actions/action/?stuck=yes")
    assert str(stuck.pk) in response.text and str(moving.pk) not in response.text
    assert str(old_but_ended.pk) not in response.text
    assert "signed more than 10 min ago, not ended" in response.text


@pytest.mark.parametrize("field", ["id", "user_op_hash", "tx_hash", "smart_account"])
def test_search_finds_an_action_by_each_identifier(staff_client, user, application, field):
    target = make_action(
        user=user, application=application, smart_account="0x" + "7a" * 20, user_op=user_op(nonce=5)
    )
    other = make_action(user=user, application=application)
    Action.objects.filter(pk=target.pk).update(tx_hash=TX, block_number=7)
    target.refresh_from_db()
    term = str(getattr(target, field)).upper().replace("0X", "0x")
    response = staff_client.get("/admin/actions/action/", {"q": term})
    assert str(target.pk) in response.text
    assert str(other.pk) not in response.text


def test_the_change_page_shows_history_read_only(staff_client, user, application):
    action = make_action(user=user, application=application)
    _advance(action, S.REJECTED)
    response = staff_client.get(f"/admin/actions/action/{action.pk}/change/")
    assert response.status_code == 200
    assert "proposed by the action tool" in response.text
    assert "open the live timeline" in response.text
    assert 'name="history-0-detail"' not in response.text  # not editable


def test_reconcile_now_records_the_staff_user(
    staff_client, staff_user, user, application, settings
):
    action = make_action(user=user, application=application)
    _advance(action, S.SIGNED, S.SUBMITTED, S.BROADCAST)
    with ScriptedServer() as bundler:
        settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url=bundler.url)
        bundler.result = {
            "success": True,
            "reason": "0x",
            "receipt": {"transactionHash": TX, "blockNumber": "0x10"},
        }
        response = staff_client.post(
            "/admin/actions/action/",
            {"action": "reconcile_now", "_selected_action": [str(action.pk)]},
            follow=True,
        )
    assert "Reconciled 1: 1 executed" in response.text
    row = Action.objects.get(pk=action.pk).history.last()
    assert row.status == S.EXECUTED
    assert row.actor_kind == "staff" and row.actor_user == staff_user
    assert row.detail.startswith("reconcile now by staff sam: included in block 16")


def test_reconcile_now_with_the_bundler_down_says_so(staff_client, user, application, settings):
    action = make_action(user=user, application=application)
    _advance(action, S.SIGNED, S.SUBMITTED)
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url="http://127.0.0.1:9")
    response = staff_client.post(
        "/admin/actions/action/",
        {"action": "reconcile_now", "_selected_action": [str(action.pk)]},
        follow=True,
    )
    assert "1 unavailable" in response.text
    assert Action.objects.get(pk=action.pk).status == S.SUBMITTED


def test_the_timeline_page_is_for_staff_only(client, user, application):
    action = make_action(user=user, application=application)
    client.force_login(user)
    response = client.get(f"/staff/actions/{action.pk}/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_timeline_polls_while_live_and_skips_unchanged_content(staff_client, user, application):
    action = make_action(user=user, application=application)
    page = staff_client.get(f"/staff/actions/{action.pk}/")
    assert page.status_code == 200
    assert 'hx-trigger="sse:changed, every 2s"' in page.text
    assert "proposed by the action tool" in page.text
    assert f'href="/staff/actions/{action.pk}/"' in page.text  # works without JavaScript
    version = Action.objects.get(pk=action.pk).updated_at.isoformat()

    unchanged = staff_client.get(
        f"/staff/actions/{action.pk}/", {"u": version}, HTTP_HX_REQUEST="true"
    )
    assert unchanged.status_code == 204 and unchanged.content == b""

    _advance(action, S.SIGNED)
    changed = staff_client.get(
        f"/staff/actions/{action.pk}/", {"u": version}, HTTP_HX_REQUEST="true"
    )
    assert changed.status_code == 200
    assert "<html" not in changed.text  # only the partial
    assert 'data-status="signed"' in changed.text
    assert 'hx-trigger="sse:changed, every 2s"' in changed.text


def test_the_timeline_stops_polling_at_a_terminal_state(staff_client, user, application):
    action = make_action(user=user, application=application)
    _advance(action, S.REJECTED)
    partial = staff_client.get(f"/staff/actions/{action.pk}/", {"u": "old"}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 286  # htmx: stop polling
    assert 'data-status="rejected"' in partial.text
    assert "hx-trigger" not in partial.text
    page = staff_client.get(f"/staff/actions/{action.pk}/")
    assert "hx-trigger" not in page.text and "(final)" in page.text


def _account_change(user, application, monkeypatch):
    values = {"kind": AccountChangeKind.ADD_OWNER, "user": user, "account": "0x" + "ab" * 20}
    return create(lifecycle=ACCOUNT_CHANGE_LIFECYCLE, actor=Actor.end_user(user), values=values)


def _spend_permission(user, application, monkeypatch):
    wallet = make_offline_wallet(user, monkeypatch)
    return make_permission(user=user, application=application, account=wallet, status=P.REQUESTED)


# Each kind: how to make a live one, its lifecycle, its pages' path, an end and what that end
# writes beside the status (an ended permission holds no key).
LIVE_KINDS = {
    "accountChange": (
        _account_change,
        ACCOUNT_CHANGE_LIFECYCLE,
        "account-changes",
        C.CANCELLED,
        {},
    ),
    "spendPermission": (
        _spend_permission,
        SPEND_PERMISSION_LIFECYCLE,
        "spend-permissions",
        P.DECLINED,
        {"session_key_encrypted": ""},
    ),
}


@pytest.mark.parametrize("kind", LIVE_KINDS)
def test_account_changes_and_spend_permissions_have_the_same_live_timeline(
    staff_client,
    user,
    application,
    monkeypatch,
    kind,
    published,
    django_capture_on_commit_callbacks,
):
    make, lifecycle, path, end, updates = LIVE_KINDS[kind]
    entity = make(user, application, monkeypatch)
    url = f"/staff/{path}/{entity.pk}/"
    page = staff_client.get(url).text
    assert f'class="badge badge-flight" data-status="{entity.status}"' in page
    assert '<span class="live-note">(live, refreshing)</span>' in page
    assert f'<a href="{url}">refresh</a>' in page
    assert 'hx-trigger="sse:changed, every 2s"' in page
    assert f'sse-connect="/staff/events?lifecycle={kind}&amp;id={entity.pk}"' in page

    # The stream the page listens to hears its transitions.
    with django_capture_on_commit_callbacks(execute=True):
        transition(lifecycle=lifecycle, pk=entity.pk, to=end, actor=Actor.system(), updates=updates)
    heard = [{k: event[k] for k in ("lifecycle", "id", "status")} for event in published]
    assert {"lifecycle": kind, "id": str(entity.pk), "status": end} in heard
    partial = staff_client.get(url, {"u": "old"}, HTTP_HX_REQUEST="true")
    assert partial.status_code == 286  # htmx: stop polling
    assert f'class="badge badge-neutral" data-status="{end}"' in partial.text
    assert "hx-get" not in partial.text and "(final)" in partial.text
    page = staff_client.get(url).text
    assert "hx-get" not in page and "sse-connect" not in page and "(final)" in page


def test_a_finished_action_shows_no_field_that_means_nothing_in_its_state(
    staff_client, user, application
):
    action = make_action(user=user, application=application)
    soon = timezone.now() + timedelta(seconds=30)
    Action.objects.filter(pk=action.pk).update(next_submit_at=soon, submit_attempts=1)
    _advance(action, S.SIGNED, S.SUBMITTED, S.BROADCAST)
    live = staff_client.get(f"/staff/actions/{action.pk}/").text
    assert "<dt>Next re-send</dt>" in live and "<dt>Expires</dt>" not in live
    assert 'class="badge badge-flight" data-status="broadcast"' in live  # amber, icon and word
    Action.objects.filter(pk=action.pk).update(tx_hash=TX, block_number=7)
    _advance(action, S.EXECUTED)
    done = staff_client.get(f"/staff/actions/{action.pk}/").text
    assert "Next re-send" not in done and "<dt>Expires</dt>" not in done
    assert 'class="badge badge-done" data-status="executed"' in done
    assert f'data-copy="{TX}"' in done  # a copy button beside the tx hash
    assert '<span class="token" title="eip155:31337/erc20:0x0">' in done  # the id on hover
    assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d", done)  # no microseconds anywhere


def test_the_timeline_expires_an_overdue_action_before_showing_it(staff_client, user, application):
    action = make_action(user=user, application=application)
    Action.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    page = staff_client.get(f"/staff/actions/{action.pk}/")
    assert 'data-status="expired"' in page.text


def test_support_staff_see_accounts_cards_and_tokens_read_only(staff_client, user):
    from actions.accounts.models import SmartAccount, Token
    from actions.card.models import Card

    account = SmartAccount.objects.create(
        user=user, kind="gnosisPay", chain_id=31337, address="0x" + "cd" * 20, owner="account:0x1"
    )
    token = Token.objects.create(
        chain_id=31337, address="0x" + "ef" * 20, symbol="EURe", name="EURe", decimals=18
    )
    card = Card.objects.create(
        user=user,
        card_id="card-9",
        last4="9999",
        safe_address=account.address,
        chain_id=31337,
        delay_address="0x" + "aa" * 20,
        token=token,
    )
    page = staff_client.get("/admin/actions/smartaccount/").content.decode()
    assert account.address in page
    page = staff_client.get(f"/admin/actions/card/{card.pk}/change/").content.decode()
    assert card.delay_address in page and 'name="_save"' not in page
    assert staff_client.get("/admin/actions/card/add/").status_code == 403
    assert staff_client.get("/admin/actions/passkey/").status_code == 200
