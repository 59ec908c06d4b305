"""Visual tests: the console home, a search, an action timeline in each status family (done,
failed, in flight, neutral end), a DM delivery's and an operation's in each of done, failed
and in flight, and the signing page in en, pt-BR and es, at 390 and 1280 px,
light and dark, in Chromium, compared with the committed baselines in picnic/tests/screenshots/
(at most MAX_CHANGED of the pixels may differ: anti-aliasing, never a layout). What changes
from run to run (ids, times, ages, the 24 h chart) is masked. The comparison runs in the same
Chromium (a canvas), so no image library is needed.

A deliberate change: `PICNIC_UPDATE_BASELINES=1 pytest -m browser picnic/tests/test_visual_browser.py`
rewrites the baselines (and the docs/img images named in DOCS, unmasked); commit them with the
change.
The staff pages also pass axe-core (WCAG 2.2 A/AA), light and dark, as the end-user pages do;
the end-user pages (signing, activity, passkeys, connected agents) pass it in dark mode too.

The agent's logo on the signing page and the connected-agents page is the one the server
fetched and re-encoded (oauth/logos.py), served from our origin: it loads under the pages'
strict CSP (img-src 'self' data:), with no CSP violation reported in the console."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from django.test import Client

from actions.execution.models import ACTION_LIFECYCLE, ActionStatus
from actions.tests.factories import make_action, make_offline_wallet
from actions.tests.test_enduser_browser import WCAG_AA
from actions.tests.test_enduser_pages import transfer
from chain.stack import free_port
from core.chains import with_endpoints
from core.lifecycle import Actor, transition
from dev.providers.local_coingecko import LocalCoinGeckoServer
from dev.testing import chromium_options, wait_until
from messaging.models import D
from messaging.tests.factories import make_delivery, make_social_account
from oauth.models import ClientProfile
from oauth.services import client_logo_fetch
from oauth.tests.logo_server import LogoServer
from operations.models import Operation
from operations.services import operation_check, operation_dispatch
from operations.tests.conftest import local_backend
from operations.tests.factories import fund, submit_operation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BASELINES = Path(__file__).parent / "screenshots"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
UPDATE = os.environ.get("PICNIC_UPDATE_BASELINES") == "1"
WIDTHS = {390: 844, 1280: 900}  # viewport width: height (a phone, a laptop)
SCHEMES = ("light", "dark")
LANGUAGES = ("en", "pt-BR", "es")
MAX_CHANGED = 0.005  # of the pixels
PIXEL_TOLERANCE = 48  # summed RGB difference a pixel may have and still count as the same
# What differs from run to run: ids, hashes and times (code, time), copy buttons, ages (the
# cells with a title), the chart of the last 24 hours, the signing countdown, and an
# operation's measured durations and backend response id (in its history's notes).
VOLATILE = (
    "code, time, button.copy, td[title], svg.chart, .chart-axis, .time-left-value, .duration,"
    ' .history .detail:has-text("resp_")'
)
# End-user pages axe checks in dark mode as well (the signing page: every language, 1280 px).
ENDUSER_DARK = ("/", "/passkeys/", "/agents/")
# The images the docs show, refreshed from the baselines.
DOCS = {
    "console-home-1280-light.png": "console-home.png",
    "signing-en-1280-light.png": "signing-page.png",
    "signing-pt-BR-1280-light.png": "enduser-pt-BR-transfer.png",
    "signing-pt-BR-390-dark.png": "signing-pt-BR-390-dark.png",
    "timeline-failed-1280-light.png": "timeline-failed.png",
    "timeline-delivery-failed-1280-light.png": "timeline-delivery-failed.png",
    "timeline-operation-failed-1280-light.png": "timeline-operation-failed.png",
}

COMPARE = """async ([a, b, tolerance]) => {
  const load = (src) => new Promise((ok, no) => {
    const image = new Image(); image.onload = () => ok(image); image.onerror = no; image.src = src;
  });
  const [x, y] = await Promise.all([load(a), load(b)]);
  if (x.width !== y.width || x.height !== y.height) return 1;
  const canvas = document.createElement("canvas");
  canvas.width = x.width; canvas.height = x.height;
  const g = canvas.getContext("2d");
  g.drawImage(x, 0, 0); const p = g.getImageData(0, 0, x.width, x.height).data;
  g.clearRect(0, 0, x.width, x.height);
  g.drawImage(y, 0, 0); const q = g.getImageData(0, 0, x.width, x.height).data;
  let changed = 0;
  for (let i = 0; i < p.length; i += 4) {
    if (Math.abs(p[i] - q[i]) + Math.abs(p[i + 1] - q[i + 1]) + Math.abs(p[i + 2] - q[i + 2]) > tolerance) changed++;
  }
  return changed / (p.length / 4);
}"""


def _png(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


@pytest.fixture
def world(live_server, settings, monkeypatch, user, staff_user, application, make_token):
    """An end user with a wallet and a transfer to sign, and an action in each status family."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    closed = f"http://127.0.0.1:{free_port()}"
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, bundler_url=closed, rpc_url=closed)
    settings.BUNDLER_TIMEOUT_SECONDS = 0.5
    settings.CONSOLE_SUMMARY_CACHE_SECONDS = 0
    make_offline_wallet(user, monkeypatch)
    make_token(user, application)  # connected: the signing page says since when
    worker = Actor.worker()
    families = {}
    for family, path, updates in (
        ("done", ["signed", "submitted", "executed"], {"tx_hash": "0x" + "ab" * 32, "block_number": 7}),
        ("failed", ["signed", "submitted", "failed"], {"error": "UserOperation reverted: ERC20: transfer amount exceeds balance"}),
        ("flight", ["signed", "submitted", "broadcast"], {}),
        ("neutral", ["rejected"], {}),
    ):  # fmt: skip
        action = make_action(user=user, application=application)
        for i, status in enumerate(path):
            last = i == len(path) - 1
            transition(
                lifecycle=ACTION_LIFECYCLE,
                pk=action.pk,
                to=ActionStatus(status),
                actor=worker,
                updates=updates if last else None,
            )
        families[family] = action
    account = make_social_account(member=user)
    deliveries = {
        "done": make_delivery(D.CLAIMED, D.SENDING, D.SENT, user=user, application=application, social_account=account, sent={"provider_message_id": "1866000000000000001"}),
        "failed": make_delivery(D.CLAIMED, D.SENDING, D.FAILED, user=user, application=application, social_account=account, failed={"last_error": "X API 403: this user does not accept Direct Messages from you"}),
        "flight": make_delivery(D.CLAIMED, D.SENDING, user=user, application=application, social_account=account),
    }  # fmt: skip
    fund(user)
    operations = {"flight": submit_operation(owner=user, application=application)}  # queued
    with local_backend(settings, work_seconds=0.0):  # done and failed by the local backend
        for family, text, end in (
            ("done", "Write a haiku", "succeeded"),
            ("failed", "[fail] Write a haiku", "failed"),
        ):
            operation = submit_operation(owner=user, application=application, input_text=text)
            operation_dispatch(operation_id=operation.pk)
            wait_until(lambda pk=operation.pk: _checked(pk) in ("succeeded", "failed"))
            assert Operation.objects.get(pk=operation.pk).state == end
            operations[family] = operation
    # The agent's logo, fetched from its (local) site by the server as registration would.
    settings.AGENT_LOGO_ALLOW_LOOPBACK = True
    with LocalCoinGeckoServer() as prices, LogoServer() as logos:
        profile = ClientProfile.objects.create(
            client_id=application.client_id, logo_uri=f"{logos.url}/logo.png"
        )
        assert client_logo_fetch(profile_id=profile.pk)
        settings.PRICE_API_URL = prices.url
        yield {
            "families": families,
            "deliveries": deliveries,
            "operations": operations,
            "sign": transfer(user, application),
        }


def _checked(operation_id) -> str:
    """The operation's state after one poll of the backend."""
    operation_check(operation_id=operation_id)
    return Operation.objects.get(pk=operation_id).state


def _session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def _pages(world, base: str) -> list[tuple[str, str, str]]:
    """(name, who, url) of every page compared."""
    pages = [
        ("console-home", "staff", f"{base}/staff/"),
        ("console-search", "staff", f"{base}/staff/search/?q=alice"),
    ]
    for family, action in world["families"].items():
        pages.append((f"timeline-{family}", "staff", f"{base}/staff/actions/{action.pk}/?live=0"))
    for family, delivery in world["deliveries"].items():
        url = f"{base}/staff/deliveries/{delivery.pk}/?live=0"
        pages.append((f"timeline-delivery-{family}", "staff", url))
    for family, operation in world["operations"].items():
        url = f"{base}/staff/operations/{operation.pk}/?live=0"
        pages.append((f"timeline-operation-{family}", "staff", url))
    for language in LANGUAGES:
        pages.append((f"signing-{language}", language, f"{base}/sign/{world['sign'].pk}/"))
    return pages


def test_the_pages_look_as_committed_and_staff_pages_pass_axe(world, live_server, user, staff_user):
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import sync_playwright

    base = live_server.url
    sessions = {"staff": _session(staff_user), "user": _session(user)}
    changed, axe_found, missing, csp_reports, logos, margins = {}, {}, [], [], {}, {}
    BASELINES.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options())
        judge = browser.new_page()
        contexts = {}
        for name, who, url in _pages(world, base):
            for width, height in WIDTHS.items():
                for scheme in SCHEMES:
                    key = (who, width, scheme)
                    if key not in contexts:
                        context = browser.new_context(
                            viewport={"width": width, "height": height},
                            color_scheme=scheme,
                            locale="en-US" if who == "staff" else who,
                            timezone_id="UTC",
                            reduced_motion="reduce",
                        )
                        session = sessions["staff" if who == "staff" else "user"]
                        context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
                        contexts[key] = context.new_page()
                        contexts[key].on("console", lambda m: _csp_report(m.text, csp_reports))
                    page = contexts[key]
                    page.goto(url)
                    page.evaluate("document.fonts.ready.then(() => true)")
                    file = f"{name}-{width}-{scheme}.png"
                    volatile = page.locator(f"{VOLATILE} >> visible=true")
                    shot = page.screenshot(mask=[volatile], animations="disabled")
                    if UPDATE and file in DOCS:  # the docs show the page as it is
                        page.screenshot(path=str(DOCS_IMG / DOCS[file]), animations="disabled")
                    if name.startswith("signing-"):  # the proxied logo, loaded under the CSP
                        logos[file] = page.locator("#agent-logo").evaluate(LOADED)
                        margins[file] = page.evaluate(HEADER_MARGINS)
                    # axe: every staff page at 1280 px in light, the home in dark too, and the
                    # signing page in dark in every language.
                    if width == 1280 and (
                        (who == "staff" and (scheme == "light" or name == "console-home"))
                        or (who != "staff" and scheme == "dark")
                    ):
                        _axe(Axe, page, file, axe_found)
                    if UPDATE:
                        (BASELINES / file).write_bytes(shot)
                        continue
                    if not (BASELINES / file).exists():
                        missing.append(file)
                        continue
                    ratio = judge.evaluate(
                        COMPARE,
                        [_png((BASELINES / file).read_bytes()), _png(shot), PIXEL_TOLERANCE],
                    )
                    if ratio > MAX_CHANGED:
                        changed[file] = round(ratio, 4)
        # The other end-user pages in dark mode (en), the agents page showing the logo too.
        enduser = contexts[("en", 1280, "dark")]
        for path in ENDUSER_DARK:
            enduser.goto(f"{base}{path}")
            _axe(Axe, enduser, f"{path} dark", axe_found)
            if path == "/agents/":
                logos[path] = enduser.locator("#agents img.logo").evaluate(LOADED)
        # The admin index's "not finished" header is one line, not one letter per line.
        admin = contexts[("staff", 1280, "light")]
        admin.goto(f"{base}/admin/")
        header = admin.locator("#tracked-work thead th").nth(1).bounding_box()
        assert header["height"] < 40 and header["width"] > 60, header
        browser.close()
    assert axe_found == {}
    assert csp_reports == []
    # Every control of the end-user header keeps the header's 16 px from the edges, the
    # language button too (at 390 px it sat 9 px from the right edge in es, past it in en).
    cramped = {
        file: {control: edges for control, edges in found.items() if min(edges) < 16}
        for file, found in margins.items()
    }
    assert {file: found for file, found in cramped.items() if found} == {}
    assert len(margins) == 12 and all("set-language" in found for found in margins.values())
    # Every signing page (12) and the agents page drew the 96 px logo from our origin.
    assert logos == {key: [96, "/agents/logo/"] for key in logos} and len(logos) == 13
    assert missing == [], "no baseline: run with PICNIC_UPDATE_BASELINES=1 and commit them"
    assert changed == {}, "these differ from their baselines (share of pixels changed)"
    assert len(_pages(world, base)) * len(WIDTHS) * len(SCHEMES) == 60


# The end-user header's controls: {id or text: [px to the left edge, px to the right edge]}.
HEADER_MARGINS = """() => Object.fromEntries([...document.querySelectorAll(
  'header.top a, header.top button, header.top select, header.top label')].map(e => {
    const box = e.getBoundingClientRect();
    return [e.id || e.textContent.trim(), [Math.round(box.left),
      Math.round(document.documentElement.clientWidth - box.right)]];
  }))"""

# An image drawn: its natural width and where it came from (the path on our origin).
LOADED = "i => [i.complete ? i.naturalWidth : 0, new URL(i.src).pathname.slice(0, 13)]"


def _csp_report(text: str, reports: list[str]) -> None:
    """Chromium reports a CSP violation in the console ("Refused to load … because it
    violates the following Content Security Policy directive")."""
    if "Content Security Policy" in text:
        reports.append(text)


def _axe(Axe, page, name: str, found: dict) -> None:  # noqa: N803 - the class, imported late
    results = Axe().run(page, options=WCAG_AA)
    violations = [
        (v["id"], [n["target"] for n in v["nodes"]][:3]) for v in results.response["violations"]
    ]
    if violations:
        found[name] = violations
