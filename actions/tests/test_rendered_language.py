"""What a pt-BR or es user sees is in their language, checked on the rendered pages (the
catalogue check, core/tests/test_translated.py, reads the sources): every end-user page, with
the data of the phone-width test (transfers, swaps, card actions, failures, active and revoked
permissions, devices, a recovery), rendered in each language. No text on the page may be the
English of a catalogue entry (a label rendered before the language was set, a status shown
by its raw label), and every status label an end-user page shows is in the catalogues."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from babel.messages.pofile import read_po
from django.conf import settings
from django.test import Client
from django.utils import translation

from actions.execution.models import ActionStatus
from actions.permissions.models import SpendPermissionStatus
from actions.tests.test_narrow_browser import pages  # noqa: F401 (the pages and their data)

pytestmark = pytest.mark.django_db(transaction=True)

LANGUAGES = {"pt-BR": "pt_BR", "es": "es"}
# The labels end-user pages show as they are (get_status_display on /permissions/, the spends
# under a permission); the other enums are shown through words of their own (badges, types).
SHOWN_CHOICES = (ActionStatus, SpendPermissionStatus)


def _catalogue(locale: str) -> dict[str, str]:
    path = settings.BASE_DIR / "locale" / locale / "LC_MESSAGES" / "django.po"
    return {
        m.id: m.string
        for m in read_po(path.open("rb"))
        if isinstance(m.id, str) and m.id and isinstance(m.string, str) and m.string
    }


class _Texts(HTMLParser):
    """Each text node and each title attribute of the body, whitespace collapsed; scripts,
    styles and code left out (addresses and hashes are no language)."""

    SKIPPED = {"script", "style", "code", "noscript"}

    def __init__(self) -> None:
        super().__init__()
        self.texts: set[str] = set()
        self._skipping = 0

    def handle_starttag(self, tag, attrs) -> None:
        if tag in self.SKIPPED:
            self._skipping += 1
        for key, value in attrs:
            if key == "title" and value:
                self.texts.add(" ".join(value.split()))

    def handle_endtag(self, tag) -> None:
        if tag in self.SKIPPED and self._skipping:
            self._skipping -= 1

    def handle_data(self, data) -> None:
        if not self._skipping and data.strip():
            self.texts.add(" ".join(data.split()))


def _texts(content: bytes) -> set[str]:
    parser = _Texts()
    parser.feed(content.decode())
    return parser.texts


@pytest.mark.parametrize("language", list(LANGUAGES))
def test_no_page_shows_the_english_of_a_translated_string(pages, user, language):  # noqa: F811
    catalogue = _catalogue(LANGUAGES[language])
    # The English that should have been translated: entries whose translation differs, and
    # that are words (not a bare symbol or number the two languages share).
    english = {
        msgid
        for msgid, translated in catalogue.items()
        if msgid != translated and any(c.isalpha() for c in msgid) and "%(" not in msgid
    }
    signed_in, signed_out = Client(), Client()
    signed_in.force_login(user)
    leaks = {}
    rendered = 0
    for name, path, *status, is_signed_in in pages:
        client = signed_in if is_signed_in else signed_out
        response = client.get(path, HTTP_ACCEPT_LANGUAGE=language)
        assert response.status_code == (status[0] if status else 200), (name, path)
        if "text/html" not in response.get("Content-Type", ""):
            continue
        rendered += 1
        found = sorted(_texts(response.content) & english)
        if found:
            leaks[name] = found
    assert rendered >= 15
    assert leaks == {}, language


@pytest.mark.parametrize("locale", list(LANGUAGES.values()))
def test_every_status_and_type_label_a_page_shows_is_translated(locale):
    catalogue = _catalogue(locale)
    with translation.override("en"):  # the msgids, whatever language a test left active
        labels = {str(label) for choices in SHOWN_CHOICES for label in choices.labels}
    missing = sorted(label for label in labels if label not in catalogue)
    assert missing == [], f"not translated in {locale}: {missing}"
