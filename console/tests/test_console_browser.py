"""The console in Debian's Chromium (Playwright): stuck work of all three apps listed, a
search by tx hash and by idempotency key, one bulk resolve and its audit row."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from console.tests.conftest import TX_HASH
from core.lifecycle import lifecycles
from core.models import ActorKind
from dev.testing import chromium_options
from messaging.models import D, Delivery

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# PICNIC_SCREENSHOT_DIR=docs/img refreshes the committed screenshots (docs/img/console-*.png).
SCREENSHOT_DIR = os.environ.get("PICNIC_SCREENSHOT_DIR")


@pytest.fixture
def page(live_server, monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls here are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            **chromium_options(),
        )  # fmt: skip
        yield browser.new_page(viewport={"width": 1280, "height": 900})
        browser.close()


def shot(page, name: str) -> None:
    if SCREENSHOT_DIR:
        page.screenshot(path=str(Path(SCREENSHOT_DIR) / name), full_page=True)


def test_find_and_resolve_stuck_work_in_the_console(page, live_server, staff_user, stuck_all):
    failed, delivery = stuck_all["failed_action"], stuck_all["unknown_delivery"]
    page.goto(f"{live_server.url}/admin/login/?next=/staff/")
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", "pw-sam")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/staff/")

    # every kind of stuck work on one page, each with its full error and links
    for entity in stuck_all.values():
        row = page.locator(f'tr[data-key="{entity.lifecycle.name}:{entity.pk}"]')
        assert row.count() == 1
        assert row.locator(f'a[href="{entity.lifecycle.timeline_url(entity.pk)}"]').count() == 1
    # One chart per kind of tracked work (actions, DMs, operations, account changes).
    assert page.locator("svg.chart").count() == len(lifecycles())
    shot(page, "console-home.png")

    # the one search box: a tx hash goes to its action's timeline
    page.fill("input[name=q]", TX_HASH)
    page.press("input[name=q]", "Enter")
    page.wait_for_url(f"{live_server.url}/staff/actions/{failed.pk}/")
    # … and an idempotency key to its delivery's
    page.goto(f"{live_server.url}/staff/")
    page.fill("input[name=q]", str(delivery.idempotency_key))
    page.press("input[name=q]", "Enter")
    page.wait_for_url(f"{live_server.url}/staff/deliveries/{delivery.pk}/")

    # a saved view, one row checked, a move previewed, a note, applied
    page.goto(f"{live_server.url}/staff/")
    page.click("text=Unknown DMs")
    page.wait_for_url("**/staff/?kind=delivery&status=unknown")
    page.check(f'input[name=key][value="delivery:{delivery.pk}"]')
    page.select_option("select[name=move]", "delivery:resolve_failed")
    page.click("text=Preview…")
    page.wait_for_url("**/staff/bulk/preview/")
    assert page.locator(f'tr[data-key="delivery:{delivery.pk}"] .ok').inner_text() == "yes"
    page.fill("textarea[name=note]", "X support confirmed it never arrived")
    shot(page, "console-bulk-preview.png")
    page.click("button[type=submit]:has-text('Resolve unknown as failed')")
    page.wait_for_url("**/staff/bulk/apply/")
    assert "1 of 1 done" in page.locator("h1").inner_text()
    shot(page, "console-bulk-result.png")

    # the audit row, on the delivery's timeline and in the database
    page.click(f"a[href='/staff/deliveries/{delivery.pk}/']")
    page.wait_for_url(f"**/staff/deliveries/{delivery.pk}/")
    assert "X support confirmed it never arrived" in page.locator(".history").inner_text()
    row = Delivery.objects.get(pk=delivery.pk).history.last()
    assert (row.status, row.actor_kind, row.actor_user_id) == (
        D.FAILED,
        ActorKind.STAFF,
        staff_user.pk,
    )
    assert "X support confirmed it never arrived" in row.detail


def test_keyboard_shortcuts_and_copy_buttons(page, live_server, staff_user, stuck_all):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"{live_server.url}/admin/login/?next=/staff/")
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", "pw-sam")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/staff/")
    rows = page.locator("[data-nav-list] tr[data-key]")
    assert rows.count() == len(stuck_all)

    # "/" focuses the search box; typing there is not a shortcut
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.name") == "q"
    page.keyboard.type("jk")
    assert page.input_value("input[name=q]") == "jk" and page.locator("tr.cursor").count() == 0
    page.evaluate("document.activeElement.blur()")

    # j and k (or the arrows) move through the rows; Enter opens the row's first link
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert rows.nth(1).get_attribute("class").endswith("cursor")
    page.keyboard.press("k")
    assert "cursor" in rows.nth(0).get_attribute("class")
    page.keyboard.press("ArrowDown")
    assert "cursor" in rows.nth(1).get_attribute("class") and page.locator("tr.cursor").count() == 1
    key = rows.nth(1).get_attribute("data-key")

    # a copy button puts the whole id on the clipboard
    rows.nth(1).locator("button.copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == key.partition(":")[2]

    page.keyboard.press("Enter")
    page.wait_for_url(f"{live_server.url}/staff/**/{key.partition(':')[2]}/**")
