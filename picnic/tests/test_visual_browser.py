"""Visual tests: the console home, a search, an action timeline in each status family (done,
failed, in flight, neutral end) and the signing page in en, pt-BR and es, at 390 and 1280 px,
light and dark, in Chromium, compared with the committed baselines in picnic/tests/screenshots/
(at most MAX_CHANGED of the pixels may differ: anti-aliasing, never a layout). What changes
from run to run (ids, times, ages, the 24 h chart) is masked. The comparison runs in the same
Chromium (a canvas), so no image library is needed.

A deliberate change: `PICNIC_UPDATE_BASELINES=1 pytest -m browser picnic/tests/test_visual_browser.py`
rewrites the baselines (and the docs/img images named in DOCS, unmasked); commit them with the
change.
The staff pages also pass axe-core (WCAG 2.2 A/AA), light and dark, as the end-user pages do."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from django.test import Client

from actions.models import ActionStatus
from actions.providers.local_coingecko import LocalCoinGeckoServer
from actions.services.transitions import action_transition
from actions.tests.factories import make_action, make_offline_wallet
from actions.tests.test_enduser_browser import WCAG_AA
from actions.tests.test_enduser_pages import transfer
from chain.stack import free_port
from core.chains import with_endpoints
from core.lifecycle import Actor
from core.testing import chromium_options

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
# cells with a title), the chart of the last 24 hours and the signing countdown.
VOLATILE = "code, time, button.copy, td[title], svg.chart, .chart-axis, .time-left-value"
# The images the docs show, refreshed from the baselines.
DOCS = {
    "console-home-1280-light.png": "console-home.png",
    "signing-en-1280-light.png": "signing-page.png",
    "signing-pt-BR-1280-light.png": "enduser-pt-BR-transfer.png",
    "signing-pt-BR-390-dark.png": "signing-pt-BR-390-dark.png",
    "timeline-failed-1280-light.png": "timeline-failed.png",
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
            action_transition(
                action_id=action.pk,
                to=ActionStatus(status),
                actor=worker,
                updates=updates if last else None,
            )
        families[family] = action
    with LocalCoinGeckoServer() as prices:
        settings.PRICE_API_URL = prices.url
        yield {"families": families, "sign": transfer(user, application)}


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
    for language in LANGUAGES:
        pages.append((f"signing-{language}", language, f"{base}/sign/{world['sign'].pk}/"))
    return pages


def test_the_pages_look_as_committed_and_staff_pages_pass_axe(world, live_server, user, staff_user):
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import sync_playwright

    base = live_server.url
    sessions = {"staff": _session(staff_user), "user": _session(user)}
    changed, axe_found, missing = {}, {}, []
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
                    page = contexts[key]
                    page.goto(url)
                    page.evaluate("document.fonts.ready.then(() => true)")
                    file = f"{name}-{width}-{scheme}.png"
                    volatile = page.locator(f"{VOLATILE} >> visible=true")
                    shot = page.screenshot(mask=[volatile], animations="disabled")
                    if UPDATE and file in DOCS:  # the docs show the page as it is
                        page.screenshot(path=str(DOCS_IMG / DOCS[file]), animations="disabled")
                    # axe: every staff page at 1280 px in light, and the home in dark too.
                    if (
                        who == "staff"
                        and width == 1280
                        and (scheme == "light" or name == "console-home")
                    ):
                        results = Axe().run(page, options=WCAG_AA)
                        found = [
                            (v["id"], [n["target"] for n in v["nodes"]][:3])
                            for v in results.response["violations"]
                        ]
                        if found:
                            axe_found[file] = found
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
        # The admin index's "not finished" header is one line, not one letter per line.
        admin = contexts[("staff", 1280, "light")]
        admin.goto(f"{base}/admin/")
        header = admin.locator("#tracked-work thead th").nth(1).bounding_box()
        assert header["height"] < 40 and header["width"] > 60, header
        browser.close()
    assert axe_found == {}
    assert missing == [], "no baseline: run with PICNIC_UPDATE_BASELINES=1 and commit them"
    assert changed == {}, "these differ from their baselines (share of pixels changed)"
    assert len(_pages(world, base)) * len(WIDTHS) * len(SCHEMES) == 36
