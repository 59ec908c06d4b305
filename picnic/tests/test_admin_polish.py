"""The admin as support staff use it (issue 17, item 6): the index, full errors, no delete on
append-only records, per-action permissions, timestamps in the staff member's time zone."""

from __future__ import annotations


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
