"""The documentation holds together: every relative link and image in README.md, CHANGELOG.md
and docs/**/*.md names a file that exists (and a heading that exists, for `#anchor`s), and the
README stays one page."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
README_MAX_LINES = 200

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target), an optional "title"; the text may wrap across lines.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The page without code: a link-like `[x](y)` in a code sample is not a link."""
    return CODE.sub("", FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        parts = urlsplit(target)
        if parts.scheme or parts.netloc:  # https:, mailto: … are not checked here
            continue
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif parts.fragment and path.suffix == ".md":
            if parts.fragment not in anchors(path):
                broken.append(f"{target}: no heading #{parts.fragment}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(page):
    assert broken_links(page) == []


def test_the_checker_catches_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Other page\n\n## Tools and resources\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\nSee [there](other.md#tools-and-resources), [gone](gone.md),\n"
        "![a picture\non two lines](img/nope.svg), [bad anchor](other.md#nope),\n"
        "[here](#page), [out](https://example.com/x.md) and `[code](not-a-link.md)`.\n"
        "```\n[also code](nope.md)\n```\n"
    )
    assert broken_links(page) == [
        "gone.md: no such file",
        "img/nope.svg: no such file",
        "other.md#nope: no heading #nope",
    ]


def test_headings_become_githubs_anchors():
    assert _slug("Connect with OAuth (hosted clients, IDEs, the SDK)") == (
        "connect-with-oauth-hosted-clients-ides-the-sdk"
    )
    assert _slug("The HTTP gate (`mcp_adapter/http.py`)") == "the-http-gate-mcp_adapterhttppy"
    assert _slug("Audience: who accepts which token") == "audience-who-accepts-which-token"


def test_the_docs_are_found_and_the_readme_is_one_page():
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "CHANGELOG.md", "docs/README.md", "docs/architecture.md"} <= names
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


def test_no_screenshot_is_left_outside_docs_img():
    assert sorted(p.name for p in (ROOT / "docs").glob("*.png")) == []
    assert len(list((ROOT / "docs" / "img").glob("*.png"))) >= 28


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_docs_say_what_changed_not_which_issue(page):
    assert re.findall(r"\bissues? #?\d+", page.read_text(), re.I) == []
