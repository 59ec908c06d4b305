"""End-user times in the browser's own zone (picnic/static/picnic/local_time.js): the server
writes them in the page's zone (UTC before the browser has told it) in <time datetime
data-local>; when the browser's zone differs, the script rewrites them in it, in the same
shape (to the minute, the zone's short name, its IANA name on hover), also on the parts htmx
swaps in, and the zone is stored with the user: afterwards, without JavaScript, the server
writes times in it too."""

from __future__ import annotations

import dataclasses
import zoneinfo

import pytest

from actions.tests.browser import sign_in
from actions.tests.test_enduser_browser import browser_env  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
ZONE = "America/Sao_Paulo"


def test_the_signing_page_shows_times_in_the_browsers_zone(
    browser_env,  # noqa: F811
    django_user_model,
    application,
    monkeypatch,
    settings,
):
    from playwright.sync_api import sync_playwright

    from actions.accounts.models import Preferences
    from actions.tests.factories import make_action, make_offline_wallet
    from chain.stack import free_port
    from dev.testing import chromium_options

    closed = f"http://127.0.0.1:{free_port()}"  # no chain: the page needs none
    settings.BUNDLER_RPC_URL = settings.CHAIN_RPC_URL = closed
    settings.CHAINS = tuple(
        dataclasses.replace(row, rpc_url=closed, bundler_url=closed) for row in settings.CHAINS
    )
    settings.BUNDLER_TIMEOUT_SECONDS = 0.5
    user = django_user_model.objects.create_user("eva", password="eva-password")
    make_offline_wallet(user, monkeypatch)
    action = make_action(user=user, application=application)
    local = action.expires_at.astimezone(zoneinfo.ZoneInfo(ZONE))
    utc = action.expires_at.strftime("%H:%M")
    offset = "UTC\u221203:00"  # São Paulo has no short name in English: its offset
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options())
        try:
            for scripts in (True, False):
                context = browser.new_context(
                    locale="en-US", timezone_id=ZONE, java_script_enabled=scripts
                )
                page = context.new_page()
                sign_in(page, browser_env.url, "eva", "eva-password")
                page.goto(f"{browser_env.url}/sign/{action.pk}/")
                shown = page.inner_text("#expires-at time")
                assert page.get_attribute("#expires-at time", "title") == ZONE  # on hover only
                assert ZONE not in shown and local.strftime(":%M:%S") not in shown, shown
                if scripts:
                    assert f"{local.hour % 12 or 12}:{local:%M}" in shown, shown
                    assert shown.endswith(offset) and "GMT" not in shown, shown
                    # the browser told the server its zone: stored with the user
                    # a selector, not wait_for_function: its polling evaluates a string,
                    # which the page's CSP (no 'unsafe-eval') refuses
                    page.locator(f'body[data-time-zone="{ZONE}"]').wait_for(state="attached")
                    assert Preferences.objects.get(user=user).time_zone == ZONE
                else:
                    # without scripts, the server writes the zone stored by the visit above
                    assert f"{local.hour % 12 or 12}:{local:%M}" in shown, shown
                    assert shown.endswith(offset), shown
                    assert utc not in shown or utc == local.strftime("%H:%M"), shown
                context.close()
        finally:
            browser.close()
