"""The admin as support staff use it: the index, full errors, no delete on
append-only records, per-action permissions, timestamps in the staff member's time zone."""

from __future__ import annotations

import re

import pytest


def test_it_lists_the_three_apps_first_and_auth_last(staff_client):
    page = staff_client.get("/admin/")
    assert page.status_code == 200
    labels = [app["app_label"] for app in page.context["app_list"]]
    assert labels[:3] == ["actions", "messaging", "operations"]
    assert labels[-1] == "auth"
    assert "oauth2_provider" in labels[3:-1]


def test_it_links_the_console_and_the_review_queue_above_everything(staff_client):
    text = staff_client.get("/admin/").text
    links = text.index('id="staff-links"')
    assert links < text.index('id="tracked-work"') < text.index("app-actions")
    assert 'href="/staff/"' in text and 'href="/staff/operations/review/"' in text


LONG_ERROR = (
    "UserOperation reverted with reason: ERC20: transfer amount exceeds balance "
    "(sender 0x1234567890123456789012345678901234567890, nonce 7, paymaster none)"
)


@pytest.fixture
def failed_action(user, application):
    from actions.execution.models import Action
    from actions.tests.factories import make_action

    action = make_action(user=user, application=application)
    Action.objects.filter(pk=action.pk).update(error=LONG_ERROR)
    return action


def test_it_shows_the_full_error_on_hover_in_the_list(staff_client, failed_action):
    text = staff_client.get("/admin/actions/action/").text
    assert LONG_ERROR not in _visible_text(text)  # shortened in the cell…
    assert f'title="{LONG_ERROR}"' in text  # …whole on hover
    assert "UserOperation reverted with reason: ERC20" in text


def test_it_shows_the_full_error_on_the_change_page(staff_client, failed_action):
    text = staff_client.get(f"/admin/actions/action/{failed_action.pk}/change/").text
    assert LONG_ERROR in _visible_text(text)


def test_it_shows_ids_short_in_monospace_with_the_full_id_on_hover(staff_client, failed_action):
    text = staff_client.get("/admin/actions/action/").text
    full = str(failed_action.pk)
    assert f'<code class="picnic-id" title="{full}">{full[:8]}…</code>' in text
    assert '<code class="picnic-id" title="0x1234567890123456789012345678901234567890">' in text
    assert "picnic/admin.css" in text


def _visible_text(html: str) -> str:
    """The page's text without its tags and attributes (what is shown, not what hovers)."""
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", " ", html))


def test_no_append_only_record_nor_work_item_can_be_deleted_in_the_admin(rf, staff_user):
    from django.contrib import admin

    from core.lifecycle import lifecycles
    from core.models import AppendOnly

    request = rf.get("/admin/")
    request.user = staff_user  # a superuser: only the admin itself can say no
    guarded = {lifecycle.model for lifecycle in lifecycles()}
    checked = []
    for model, model_admin in admin.site._registry.items():
        if issubclass(model, AppendOnly) or model in guarded:
            assert not model_admin.has_delete_permission(request), model
            assert "delete_selected" not in model_admin.get_actions(request), model
            checked.append(model._meta.label)
    assert {"actions.Action", "messaging.Delivery", "operations.Operation"} <= set(checked)
    assert "operations.LedgerEntry" in checked


def test_the_delete_page_of_an_action_is_forbidden(staff_client, failed_action):
    change = staff_client.get(f"/admin/actions/action/{failed_action.pk}/change/").text
    assert "deletelink" not in change
    assert staff_client.get(f"/admin/actions/action/{failed_action.pk}/delete/").status_code == 403


def test_the_delete_page_of_a_ledger_entry_is_forbidden(staff_client, user):
    from decimal import Decimal

    from operations import billing
    from operations.models import LedgerEntry

    billing.wallet_grant(owner=user, amount=Decimal("5"))
    entry = LedgerEntry.objects.get(wallet__owner=user)
    page = staff_client.get(f"/admin/operations/ledgerentry/{entry.pk}/change/")
    assert page.status_code == 200 and "deletelink" not in page.text
    url = f"/admin/operations/ledgerentry/{entry.pk}/delete/"
    assert staff_client.get(url).status_code == 403
    assert staff_client.post(url, {"post": "yes"}).status_code == 403
    assert LedgerEntry.objects.filter(pk=entry.pk).exists()


# Each admin action, the changelist it is on, and the permission that shows it.
ADMIN_ACTIONS = [
    ("/admin/actions/action/", "reconcile_now", "actions.reconcile_action"),
    ("/admin/actions/action/", "mark_failed", "actions.resolve_action"),
    ("/admin/actions/action/", "resend", "actions.resolve_action"),
    ("/admin/actions/rampaccount/", "refresh_kyc", "actions.refresh_kyc_rampaccount"),
    ("/admin/messaging/delivery/", "cancel_selected", "messaging.cancel_delivery"),
    ("/admin/operations/operation/", "pause", "operations.pause_operation"),
    ("/admin/operations/operation/", "resume", "operations.pause_operation"),
]


def _staff_with(make_user, name: str, *perms: str):
    from django.contrib.auth.models import Permission

    member = make_user(name, is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        member.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    return member


def _offered_actions(client, url: str) -> list[str]:
    page = client.get(url)
    assert page.status_code == 200
    form = page.context["action_form"]
    return [] if form is None else [name for name, _ in form.fields["action"].choices if name]


@pytest.mark.parametrize(("url", "action", "perm"), ADMIN_ACTIONS)
def test_an_admin_action_is_hidden_from_staff_without_its_permission(
    client, make_user, url, action, perm
):
    app_label = perm.split(".")[0]
    model = url.rstrip("/").rsplit("/", 1)[1]
    view = f"{app_label}.view_{model}"
    client.force_login(_staff_with(make_user, "viewer", view))
    assert action not in _offered_actions(client, url)
    client.force_login(_staff_with(make_user, "doer", view, perm))
    assert action in _offered_actions(client, url)


def test_posting_a_hidden_action_changes_nothing(client, make_user, user):
    from decimal import Decimal

    from operations import billing
    from operations.models import Operation, State
    from operations.services import operation_submit

    billing.wallet_grant(owner=user, amount=Decimal("100"))
    op = operation_submit(
        owner=user, application=None, tool="text-gen", category="writing", input_text="hi"
    )
    client.force_login(_staff_with(make_user, "viewer", "operations.view_operation"))
    before = Operation.objects.get(pk=op.pk).state
    client.post(
        "/admin/operations/operation/",
        {"action": "pause", "_selected_action": [str(op.pk)], "index": 0},
    )
    assert Operation.objects.get(pk=op.pk).state == before != State.PAUSED
    assert not op.history.filter(status=State.PAUSED).exists()


def test_resolving_an_unknown_delivery_needs_its_permission(client, make_user, queue):
    delivery = queue()
    client.force_login(_staff_with(make_user, "viewer", "messaging.view_delivery"))
    url = f"/admin/messaging/delivery/{delivery.pk}/resolve/"
    assert client.get(url).status_code == 403
    # the page shows the delivery: the resolve permission alone does not open it
    client.force_login(_staff_with(make_user, "resolver", "messaging.resolve_delivery"))
    assert client.get(url).status_code == 403
    client.force_login(
        _staff_with(make_user, "both", "messaging.resolve_delivery", "messaging.view_delivery")
    )
    assert client.get(url).status_code == 200


@pytest.fixture
def at_ten_utc(failed_action):
    """The action created at 10:00:00.123456 UTC on a winter day."""
    from datetime import UTC, datetime

    from actions.execution.models import Action

    when = datetime(2026, 12, 3, 10, 0, 0, 123456, tzinfo=UTC)
    Action.objects.filter(pk=failed_action.pk).update(created_at=when)
    return failed_action


def test_times_are_shown_to_the_second_in_utc_by_default(staff_client, at_ten_utc):
    text = staff_client.get(f"/admin/actions/action/{at_ten_utc.pk}/change/").text
    assert "2026-12-03 10:00:00 UTC" in text
    assert ".123456" not in text
    assert "Times in UTC" in text


def test_staff_choose_their_time_zone_and_see_times_in_it(staff_client, at_ten_utc):
    change = f"/admin/actions/action/{at_ten_utc.pk}/change/"
    form = staff_client.get("/admin/timezone/", {"next": change})
    assert form.status_code == 200
    assert '<option value="Europe/Berlin">' in form.text and f'value="{change}"' in form.text
    chosen = staff_client.post("/admin/timezone/", {"timezone": "Europe/Berlin", "next": change})
    assert chosen.status_code == 302 and chosen["Location"] == change
    assert chosen.cookies["picnic_timezone"].value == "Europe/Berlin"
    text = staff_client.get(change).text
    assert "2026-12-03 11:00:00 CET" in text and "10:00:00" not in text
    assert "Times in Europe/Berlin" in text
    # The API stays in UTC whatever the browser's cookie says.
    from django.utils import timezone

    assert timezone.get_current_timezone_name() == "UTC"


def test_an_unknown_time_zone_is_refused_and_a_stale_cookie_ignored(staff_client, at_ten_utc):
    refused = staff_client.post("/admin/timezone/", {"timezone": "Mars/Olympus"})
    assert refused.status_code == 200 and "picnic_timezone" not in refused.cookies
    staff_client.cookies["picnic_timezone"] = "Mars/Olympus"
    text = staff_client.get(f"/admin/actions/action/{at_ten_utc.pk}/change/").text
    assert "2026-12-03 10:00:00 UTC" in text


def test_the_time_zone_page_does_not_redirect_off_site(staff_client):
    chosen = staff_client.post(
        "/admin/timezone/", {"timezone": "Asia/Tokyo", "next": "https://evil.example/"}
    )
    assert chosen["Location"] == "/admin/"


def test_the_review_queue_shows_the_request_time_without_microseconds(staff_client, user):
    from decimal import Decimal

    from operations import billing
    from operations.services import operation_submit

    billing.wallet_grant(owner=user, amount=Decimal("100"))
    op = operation_submit(
        owner=user, application=None, tool="text-gen", category="sensitive", input_text="hi"
    )
    staff_client.cookies["picnic_timezone"] = "Asia/Tokyo"
    text = staff_client.get("/staff/operations/review/").text
    assert str(op.pk) in text
    assert re.search(r"requested <time [^>]+>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d JST</time>", text)
    assert op.review["requested_at"] not in text


def test_the_review_queue_tells_approve_from_reject_and_asks_before_rejecting(staff_client, user):
    from decimal import Decimal

    from operations import billing
    from operations.services import operation_submit

    billing.wallet_grant(owner=user, amount=Decimal("100"))
    op = operation_submit(
        owner=user, application=None, tool="text-gen", category="sensitive", input_text="hi"
    )
    text = staff_client.get("/staff/operations/review/").text
    article = text[text.index(f'id="review-{op.pk}"') :]
    assert re.search(r'<textarea id="note-[^"]+" name="note" rows="3"[^>]* required>', article)
    approve = re.search(r'<button class="approve"[^>]*>', article).group(0)
    reject = re.search(r'<button class="reject danger"[^>]*>', article).group(0)
    assert "hx-confirm" not in approve
    assert 'hx-confirm="Reject this text-gen operation of alice?' in reject
    assert "{#" not in text and "{%" not in text


@pytest.mark.django_db
def test_every_list_draws_djangos_row_checkbox_without_a_widget_render(make_user, rf):
    """Each registered admin draws the row checkbox through core.admin.FastListRows,
    and its markup is what Django's widget renders, a name that needs escaping included."""
    from django.contrib import admin

    from core.admin import FastListRows

    user = make_user('<b>o\'neil & "co"</b>')
    for model, model_admin in admin.site._registry.items():
        assert isinstance(model_admin, FastListRows), model
    user_admin = admin.site._registry[type(user)]
    assert user_admin.action_checkbox(user) == admin.ModelAdmin.action_checkbox(user_admin, user)
    assert "&lt;b&gt;o&#x27;neil &amp; &quot;co&quot;&lt;/b&gt;" in user_admin.action_checkbox(user)


@pytest.mark.django_db
def test_the_user_list_shows_each_row_checkbox(staff_client, make_user):
    make_user("maria")
    text = staff_client.get("/admin/auth/user/").text
    assert re.search(r'<input type="checkbox" name="_selected_action" value="\d+" '
                     r'class="action-select" aria-label="Select this object for an action - '
                     r'maria">', text)  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["?is_staff__exact=0&q=m", "?is_staff__exact=0&o=-1", ""])
def test_a_filtered_lists_row_links_keep_the_filters_without_a_url_resolution_each(
    staff_client, make_user, monkeypatch, query
):
    """Each row links to its change page with the list's filters to come back to, as Django
    draws it (the same page with Django's own ChangeList), and no row's URL is resolved."""
    from django.contrib import admin
    from django.contrib.admin.templatetags import admin_urls
    from django.contrib.admin.views.main import ChangeList
    from django.contrib.auth import get_user_model

    for name in ("maria", "marta", "mario & co"):
        make_user(name)
    resolved = []
    real = admin_urls.resolve
    monkeypatch.setattr(admin_urls, "resolve", lambda path: resolved.append(path) or real(path))
    ours = staff_client.get("/admin/auth/user/" + query).text
    rows = len(re.findall(r'name="_selected_action"', ours))
    assert rows >= 3 and len(resolved) <= 1  # at most the page's own "add" link
    user_admin = admin.site._registry[get_user_model()]
    monkeypatch.setattr(type(user_admin), "get_changelist", lambda self, request, **kw: ChangeList)
    djangos = staff_client.get("/admin/auth/user/" + query).text
    strip = re.compile(r'(csrfmiddlewaretoken" value="|X-CSRFToken": ")[^"]+"')
    assert strip.sub("", ours) == strip.sub("", djangos)
    if query:
        assert "_changelist_filters=" in ours
