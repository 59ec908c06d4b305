"""The back-office in Debian's Chromium (Playwright) at 1280 px: the action and operation lists
fit the window (no column cut off), and Reject in the review queue asks before it acts.
PICNIC_SCREENSHOT_DIR=docs/img refreshes docs/img/admin-actions.png,
docs/img/admin-operations.png and docs/img/review-queue.png."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path

import pytest

from dev.testing import chromium_options
from operations import billing
from operations.models import Operation, State
from operations.services import operation_submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENSHOT_DIR = os.environ.get("PICNIC_SCREENSHOT_DIR")
ERROR = (
    "UserOperation reverted with reason: ERC20: transfer amount exceeds balance "
    "(sender 0x1234567890123456789012345678901234567890, nonce 7)"
)


@pytest.fixture
def staff_page(live_server, staff_user, client, monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls here are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    client.force_login(staff_user)
    session = client.cookies["sessionid"].value
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            **chromium_options(),
        )
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        context.add_cookies([{"name": "sessionid", "value": session, "url": live_server.url}])
        yield context.new_page()
        browser.close()


def _fits_the_window(page) -> bool:
    """Neither the page nor the list (Django scrolls it sideways in its box) is cut off."""
    return page.evaluate(
        "document.documentElement.scrollWidth <= window.innerWidth && "
        "[...document.querySelectorAll('.results')].every(e => e.scrollWidth <= e.clientWidth)"
    )


def _shoot(page, name: str) -> None:
    if SCREENSHOT_DIR:
        page.screenshot(path=str(Path(SCREENSHOT_DIR) / name), full_page=False)


def test_the_lists_fit_1280_px_with_the_full_error_on_hover(
    staff_page, live_server, user, application, queue
):
    from actions.execution.models import Action
    from actions.tests.factories import make_action

    for _ in range(3):
        action = make_action(user=user, application=application)
        Action.objects.filter(pk=action.pk).update(error=ERROR)
    billing.wallet_grant(owner=user, amount=Decimal("100"))
    for category in ("writing", "sensitive", "writing"):
        op = operation_submit(
            owner=user, application=None, tool="text-gen", category=category, input_text="hi"
        )
    Operation.objects.filter(pk=op.pk).update(last_error="backend timed out after 30 s " * 4)

    staff_page.goto(f"{live_server.url}/admin/actions/action/")
    cell = staff_page.locator("td.field-error_short span").first
    assert cell.get_attribute("title") == ERROR
    assert cell.inner_text() != ERROR  # shortened in the list
    _shoot(staff_page, "admin-actions.png")
    assert _fits_the_window(staff_page)

    from messaging.models import Delivery

    delivery = queue()
    Delivery.objects.filter(pk=delivery.pk).update(last_error=ERROR)
    staff_page.goto(f"{live_server.url}/admin/messaging/delivery/")
    assert staff_page.locator("td.field-reason_short span").first.get_attribute("title") == ERROR
    assert _fits_the_window(staff_page)

    staff_page.goto(f"{live_server.url}/admin/operations/operation/")
    assert staff_page.locator("th.column-error_short").is_visible()  # the last column
    _shoot(staff_page, "admin-operations.png")
    assert _fits_the_window(staff_page)


def test_reject_asks_first_and_records_the_staff_user(staff_page, live_server, user, staff_user):
    billing.wallet_grant(owner=user, amount=Decimal("100"))
    op = operation_submit(
        owner=user, application=None, tool="text-gen", category="sensitive", input_text="hi"
    )
    assert op.state == State.NEEDS_REVIEW
    staff_page.goto(f"{live_server.url}/staff/operations/review/")
    article = staff_page.locator(f"#review-{op.pk}")
    article.locator("textarea[name=note]").fill("prompt asks for personal data")
    _shoot(staff_page, "review-queue.png")

    decisions = []
    staff_page.on(
        "request",
        lambda r: decisions.append(r) if r.method == "POST" and "/review/" in r.url else 0,
    )
    staff_page.once("dialog", lambda dialog: dialog.dismiss())
    article.locator("button.reject").click()
    # htmx sends right after confirm() returns, in the click's own task: nothing went out.
    staff_page.evaluate("1")
    assert decisions == []
    op.refresh_from_db()
    assert op.state == State.NEEDS_REVIEW and not op.history.filter(actor_user=staff_user)

    staff_page.once("dialog", lambda dialog: dialog.accept())
    article.locator("button.reject").click()
    staff_page.locator("#review-queue").get_by_text("Nothing waits for review").wait_for()
    op.refresh_from_db()
    assert len(decisions) == 1 and "decision=reject" in decisions[0].post_data
    assert op.state == State.CANCELLED
    decided = op.history.get(actor_user=staff_user)
    assert decided.status == State.CANCELLED and "personal data" in decided.detail
