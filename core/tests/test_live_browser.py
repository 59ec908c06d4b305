"""A live update arriving without reload: Debian's Chromium (Playwright) on a
staff timeline served by uvicorn on picnic.asgi; a transition committed by another connection
reaches the page through its event stream, before the fallback poll would have run."""

from __future__ import annotations

import pytest
from django.db import connections

from actions.execution.models import ACTION_LIFECYCLE
from core.lifecycle import Actor, transition
from core.tests.test_live import _action, _in_another_thread, _session
from dev.testing import chromium_options, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every htmx request the page makes, with what triggered it (None: the poll).
RECORD_TRIGGERS = """
window.__triggers = [];
document.addEventListener("htmx:beforeRequest", function (event) {
  var trigger = event.detail.requestConfig.triggeringEvent;
  window.__triggers.push(trigger ? trigger.type : null);
});
window.__done = 0;
document.addEventListener("htmx:afterRequest", function () { window.__done += 1; });
"""


@pytest.fixture
def chromium_page(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls here are still sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            **chromium_options(),
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_init_script(RECORD_TRIGGERS)
        yield context
        # The ORM calls made while Playwright runs use a connection of their own (its event
        # loop is another async context): close it, or the test database cannot be dropped.
        connections.close_all()
        browser.close()


def test_a_staff_timeline_updates_without_reload_when_a_transition_commits(
    settings, tmp_path, asgi_server, chromium_page, client, staff_user, user, application
):
    settings.EVENTS_URL = "local://"
    settings.EVENTS_DIR = tmp_path / "events"
    action = _action(user, application)
    server = asgi_server()
    base = f"http://127.0.0.1:{server.port}"
    chromium_page.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": _session(client, staff_user),
                "url": base,
            }
        ]
    )
    page = chromium_page.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{base}/staff/actions/{action.pk}/")
    page.wait_for_selector(".live[data-live-open]")
    assert page.locator("#timeline [data-status]").get_attribute("data-status") == "proposed"
    # On connecting, the stream asks the page to re-check once (nothing changed: 204).
    wait_until(lambda: page.evaluate("window.__done") == 1)
    page.evaluate("window.__loaded = true")

    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to="signed", actor=Actor.system()
        )
    )
    # Within the 15 s in which the open stream holds the fallback poll back.
    page.wait_for_selector('#timeline [data-status="signed"]', timeout=10_000)
    assert page.evaluate("window.__loaded") is True  # the same document: no reload
    assert page.evaluate("window.__triggers") == ["sse:changed", "sse:changed"]

    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to="failed",
            actor=Actor.system(),
            detail="browser test",
        )
    )
    page.wait_for_selector('#timeline [data-status="failed"]', timeout=10_000)
    assert page.locator("#timeline .final").is_visible()
    # At the terminal status the stream sent `end` and the extension closed it.
    page.wait_for_selector(".live:not([data-live-open])", state="attached")
    assert page.evaluate("window.__triggers") == ["sse:changed"] * 3
    assert errors == []


def test_without_a_stream_the_timeline_falls_back_to_polling(
    settings, live_server, chromium_page, client, staff_user, user, application
):
    # live_server is WSGI: the stream answers `end` at once, the extension closes it and the
    # page polls every 2 s as before.
    action = _action(user, application)
    chromium_page.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": _session(client, staff_user),
                "url": live_server.url,
            }
        ]
    )
    page = chromium_page.new_page()
    page.goto(f"{live_server.url}/staff/actions/{action.pk}/")
    page.wait_for_selector('#timeline [data-status="proposed"]')
    _in_another_thread(
        lambda: transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to="signed", actor=Actor.system()
        )
    )
    page.wait_for_selector('#timeline [data-status="signed"]', timeout=10_000)
    assert page.locator(".live[data-live-open]").count() == 0
    triggers = page.evaluate("window.__triggers")
    assert triggers and set(triggers) == {None}  # only polls, no stream event
