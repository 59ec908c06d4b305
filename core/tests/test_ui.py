"""The design system's tags (core/templatetags/picnic_ui.py) and stylesheet: every status has
a family, a badge says it with an icon and a word, and no colour rule reaches a wrapper."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings

from core.lifecycle import lifecycles
from core.templatetags.picnic_ui import badge_html, copyable, status_family

STATIC = [p for p in Path(settings.BASE_DIR).glob("*/static/**/*.css")]


@pytest.mark.parametrize(
    ("status", "family"),
    [
        ("executed", "done"),
        ("sent", "done"),
        ("succeeded", "done"),
        ("failed", "failed"),
        ("unknown", "failed"),
        ("expired", "neutral"),
        ("rejected", "neutral"),
        ("cancelled", "neutral"),
        ("broadcast", "flight"),
        ("needs_review", "flight"),
        ("queued", "flight"),
    ],
)
def test_each_status_has_its_family(status, family):
    assert status_family(status) == family


def test_every_terminal_status_of_every_lifecycle_is_a_finished_family():
    for lifecycle in lifecycles():
        for status in lifecycle.terminal:
            assert status_family(status) in {"done", "failed", "neutral"}, (lifecycle, status)
        for status in set(lifecycle.moves) - lifecycle.terminal:
            # "active" (a spending permission in force) is a steady state, not work under way:
            # green like a passkey that is active, though it can still end.
            families = {"flight", "failed"} | ({"done"} if status == "active" else set())
            assert status_family(status) in families, (lifecycle, status)


def test_a_badge_has_an_icon_and_a_word_and_escapes_its_label():
    html = badge_html("needs_review")
    assert (
        html.startswith('<span class="badge badge-flight"><svg') and "needs review</span>" in html
    )
    main = badge_html("failed", main=True)
    assert 'data-status="failed"' in main and main.endswith("failed</strong>")
    assert "&lt;b&gt;" in badge_html("failed", label="<b>")


def test_a_copy_button_carries_the_whole_value():
    html = copyable("0x" + "ab" * 32, short=True)
    assert 'data-copy="0x' + "ab" * 32 + '"' in html and ">0xabab…abab</code>" in html
    assert copyable("") == "—"


def test_no_stylesheet_colours_the_live_wrapper():
    # `.live` wraps every timeline and the needs-attention list: a colour on it painted all of
    # them orange-red.
    for path in STATIC:
        css = path.read_text()
        assert not re.search(r"(^|[\s,}])\.live\s*[{,]", css), path


def test_every_colour_in_the_page_stylesheets_is_a_token():
    for name in ("picnic/app.css", "console/console.css"):
        (path,) = [p for p in STATIC if p.as_posix().endswith(name)]
        assert not re.findall(r"#[0-9a-fA-F]{3,6}\b", path.read_text()), path
