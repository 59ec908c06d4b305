"""Nothing on an end-user page is left in English: every string its templates and the signing
views mark for translation is in the pt_BR and es catalogues, translated (the test reads the
sources itself, so a new string without a translation fails here, not in front of a user)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.pofile import read_po
from django.conf import settings

ROOT = Path(settings.BASE_DIR)
# The end-user pages' templates and the Python that feeds them.
TEMPLATES = [
    *sorted((ROOT / "templates" / "actions").glob("*.html")),
    ROOT / "templates" / "enduser" / "base.html",
    ROOT / "templates" / "registration" / "login.html",
    *sorted((ROOT / "oauth" / "templates" / "oauth").glob("*.html")),
]
SOURCES = [
    ROOT / "actions" / "signing_page" / "views.py",
    ROOT / "actions" / "signing_page" / "facts.py",
    ROOT / "actions" / "accounts" / "pages.py",
    ROOT / "actions" / "pages.py",
]

TRANSLATE = re.compile(r"""{%\s*(?:translate|trans)\s+(?:"([^"]*)"|'([^']*)')""")
BLOCK = re.compile(
    r"{%\s*blocktrans(?:late)?\b([^%]*)%}(.*?){%\s*endblocktrans(?:late)?\s*%}", re.S
)
GETTEXT = re.compile(r"""\b_\(\s*((?:"[^"]*"\s*)+)\)""")


def _block_id(options: str, body: str) -> str:
    singular = re.split(r"{%\s*plural\s*%}", body)[0]
    text = re.sub(r"{{\s*(\w+)\s*}}", r"%(\1)s", singular)
    return " ".join(text.split()) if "trimmed" in options else text


def wanted() -> set[str]:
    ids = set()
    for path in TEMPLATES:
        text = path.read_text()
        ids |= {a or b for a, b in TRANSLATE.findall(text)}
        ids |= {_block_id(options, body) for options, body in BLOCK.findall(text)}
    for path in SOURCES:
        for literal in GETTEXT.findall(path.read_text()):
            ids.add("".join(re.findall(r'"([^"]*)"', literal)))
    return {i for i in ids if i.strip()}


@pytest.mark.parametrize("language", ["pt_BR", "es"])
def test_every_end_user_string_is_translated(language):
    path = ROOT / "locale" / language / "LC_MESSAGES" / "django.po"
    catalogue = {
        (m.id if isinstance(m.id, str) else m.id[0]): m for m in read_po(path.open("rb")) if m.id
    }
    ids = wanted()
    assert len(ids) > 100  # the reader finds the strings at all
    missing = sorted(i for i in ids if i not in catalogue)
    assert missing == [], f"not in {language}: {missing[:5]}"
    empty = sorted(
        i
        for i in ids
        if catalogue[i].fuzzy
        or not (
            catalogue[i].string
            if isinstance(catalogue[i].string, str)
            else all(catalogue[i].string)
        )
    )
    assert empty == [], f"untranslated in {language}: {empty[:5]}"
