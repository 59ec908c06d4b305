"""The documentation holds together: every relative link and image in README.md, CHANGELOG.md
and docs/**/*.md names a file that exists (and a heading that exists, for `#anchor`s), and the
README stays one page."""

from __future__ import annotations

import importlib
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


# --- the docs match the code ------------------------------------------------------------------
# What people read must not drift from what runs: the reading lists name every page, nothing
# points outside the repository, every code name quoted exists, and the figures are the code's.

DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Pages whose words are history (what changed), not a description of the code.
HISTORY = {ROOT / "CHANGELOG.md"}
# Project packages: a `pkg.name…` in a docs page names something of ours.
PACKAGES = (
    "actions",
    "console",
    "core",
    "dev",
    "evm",
    "mcp_adapter",
    "messaging",
    "oauth",
    "operations",
)
NUMBERS = {
    w: n for n, w in enumerate("zero one two three four five six seven eight nine ten".split())
}
# Quoted paths that are not this repository's files: a client's own config files, URLs.
NOT_OURS = re.compile(r"^(\.vscode/|\.cursor/|/)")
# Named only to say they are gone.
GONE = {"chain/contracts/WordReader.sol"}


def _links(page: Path) -> set[str]:
    """The relative links' paths (a URL with a scheme or host is not ours to check)."""
    parts = [urlsplit(t) for t in LINK.findall(_prose(page.read_text()))]
    return {p.path for p in parts if not (p.scheme or p.netloc)}


def _quoted(page: Path) -> list[str]:
    return [m.strip("`").strip() for m in CODE.findall(FENCE.sub("", page.read_text()))]


def _source_texts() -> str:
    """Every Python source of the project, as one string (string literals are names too:
    loggers, health-check keys, permission codenames)."""
    return "\n".join(
        p.read_text()
        for pkg in (*PACKAGES, "picnic")
        for p in (ROOT / pkg).rglob("*.py")
        if "node_modules" not in p.parts
    )


def test_both_reading_lists_name_every_docs_page_and_decision():
    pages = {p.name for p in DOCS.glob("*.md") if p.name != "README.md"}
    listed_in_readme = {Path(t).name for t in _links(README) if t.startswith("docs/")}
    listed_in_docs = {Path(t).name for t in _links(DOCS / "README.md")}
    assert sorted(pages - listed_in_readme) == [], "missing from README.md's reading list"
    assert sorted(pages - listed_in_docs) == [], "missing from docs/README.md"
    decisions = {p.name for p in (DOCS / "decisions").glob("*.md")}
    assert sorted(decisions - listed_in_docs) == [], "decisions missing from docs/README.md"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_outside_the_repository(page):
    outside = [
        target
        for target in [*_links(page), *(q for q in _quoted(page) if q.startswith("../"))]
        if target and not (page.parent / unquote(target)).resolve().is_relative_to(ROOT)
    ]
    assert outside == []


def _where(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def _name_exists(name: str, sources: str) -> bool:
    """A dotted name: a module or its attribute, an app's model, or a string our code uses
    (a logger, a permission codename, a health-check key)."""
    from django.apps import apps

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                found = getattr(found, attribute)
            return True
        except AttributeError:
            break
    if len(parts) == 2:
        try:
            apps.get_model(name)
            return True
        except LookupError:
            pass
    return any(f"{q}{s}{q}" in sources for q in "\"'" for s in (name, parts[-1]))


def _missing_names(pages) -> list[str]:
    dotted = re.compile(rf"((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?")
    sources = _source_texts()
    missing = []
    for page in pages:
        for quoted in _quoted(page):
            found = dotted.fullmatch(quoted)
            if found and not _name_exists(found[1], sources):
                missing.append(f"{_where(page)}: {found[1]}")
    return missing


def _missing_files(pages) -> list[str]:
    path = re.compile(r"[\w.-]+(?:/[\w.-]+)+\.(?:py|html|md|toml|cfg|txt|json|js|css|sol|yul)")
    ours = [
        str(p.relative_to(ROOT))
        for p in ROOT.rglob("*")
        if p.is_file() and not {".venv", "node_modules", ".git", "var"} & set(p.parts)
    ]
    missing = []
    for page in pages:
        for quoted in _quoted(page):
            if not path.fullmatch(quoted) or NOT_OURS.match(quoted) or quoted in GONE:
                continue
            # A path may be given from the repository or from its app (`providers/x.py`).
            if not any(f == quoted or f.endswith("/" + quoted) for f in ours):
                missing.append(f"{_where(page)}: {quoted}")
    return missing


def _missing_commands(pages) -> list[str]:
    from django.core.management import get_commands

    commands = set(get_commands())
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    missing = []
    for page in pages:
        text = page.read_text()
        for command in re.findall(r"manage\.py ([a-z_]+)", text):
            if command not in commands:
                missing.append(f"{_where(page)}: manage.py {command}")
        for target in re.findall(r"`make ([a-z][\w-]*)", text):
            if target not in targets:
                missing.append(f"{_where(page)}: make {target}")
    return missing


DESCRIBING = [p for p in PAGES if p not in HISTORY]


def test_every_code_name_a_doc_quotes_exists():
    assert _missing_names(DESCRIBING) == []


def test_every_file_a_doc_quotes_exists():
    assert _missing_files(DESCRIBING) == []


def test_every_command_and_make_target_a_doc_names_exists():
    assert _missing_commands(DESCRIBING) == []


def test_the_checkers_catch_a_renamed_function_a_moved_file_and_a_missing_command(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "`actions.proposals.services.propose_nothing` and `actions.proposals.services."
        "transfer_propose`, `actions.Action` and `actions.resolve_action`;\n"
        "`actions/gone.py` and `actions/bridges/services.py`; run `manage.py mint_nothing` or\n"
        "`manage.py mint_agent_token`, `make test-slow` or `make test-fast`.\n"
    )
    assert _missing_names([page]) == ["page.md: actions.proposals.services.propose_nothing"]
    assert _missing_files([page]) == ["page.md: actions/gone.py"]
    assert _missing_commands([page]) == [
        "page.md: manage.py mint_nothing",
        "page.md: make test-slow",
    ]


def test_the_figures_the_docs_quote_about_the_code_are_the_codes():
    from core.lifecycle import lifecycles

    kinds = len(lifecycles())
    figure = re.compile(r"\b(\w+) kinds of (?:tracked )?work\b", re.I)
    quoted = [
        (str(page.relative_to(ROOT)), match)
        for page in DESCRIBING
        for match in figure.findall(page.read_text())
        if match.lower() in NUMBERS or match.isdigit()
    ]
    assert quoted, "no page says how many kinds of work are tracked"
    wrong = [(p, m) for p, m in quoted if NUMBERS.get(m.lower(), m) not in (kinds, str(kinds))]
    assert wrong == [], f"{kinds} kinds of work are registered"
    # The tools MCP clients may call as tasks.
    from mcp_adapter.task_store import TASK_TOOLS

    said = re.findall(
        r"the (\w+) tools list `execution\.taskSupport|for these (\w+) tools",
        (DOCS / "mcp.md").read_text(),
    )
    assert said and {NUMBERS.get(w.lower()) for pair in said for w in pair if w} == {
        len(TASK_TOOLS)
    }
    # The README quotes no test count: a count it printed (~900) drifted to 1,491.
    assert re.findall(r"[~≈]?\d[\d,]* tests\b", README.read_text()) == []


def _claims():
    """Statements the docs once made that the code made false: each is checked against the
    code, so writing it again fails while the code still says otherwise."""
    from actions.accounts.models import AccountChangeKind
    from mcp_adapter.tools import TOOLS_BY_NAME

    return [
        (
            r"no MCP tool starts",
            "tong_operation_start" in TOOLS_BY_NAME,
            "an MCP tool starts a generation operation (tong_operation_start)",
        ),
        (
            r"second device signs (?:for )?nothing|signs for\s+nothing yet",
            AccountChangeKind.ADD_OWNER in AccountChangeKind.values,
            "a linked device becomes an owner on chain and signs (AccountChangeKind.ADD_OWNER)",
        ),
        (
            r"OpenTelemetry[^.]*\bwe do not use it|we do not use it[^.]*OpenTelemetry",
            (ROOT / "picnic" / "otel.py").exists(),
            "OpenTelemetry is used when configured (picnic/otel.py)",
        ),
        (
            r"\.\./shared/",
            True,
            "nothing outside the repository exists next to a clone",
        ),
    ]


@pytest.mark.parametrize("page", DESCRIBING, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_repeats_a_claim_the_code_made_false(page):
    text = re.sub(r"\s+", " ", page.read_text())
    false = [
        why
        for pattern, code_disagrees, why in _claims()
        if code_disagrees and re.search(pattern, text, re.I)
    ]
    assert false == []
