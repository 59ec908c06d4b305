"""A device as people name it ("Chrome on macOS", "Safari on iPhone"), read from the User-Agent
header a passkey was created with. The header stays stored as it came (actions.Passkey); pages
and e-mails show only this. No parsing library is installed, and these few tokens name what
people use; anything else is an "Unknown browser"."""

from __future__ import annotations

from django.utils.translation import gettext

# First match wins: a browser's header also names the engines it is built on (Edge's says
# "Chrome/… Safari/…", Chrome's says "Safari/…"), so the most specific token comes first.
BROWSERS: tuple[tuple[str, str], ...] = (
    ("Edg/", "Edge"),
    ("EdgA/", "Edge"),
    ("EdgiOS/", "Edge"),
    ("OPR/", "Opera"),
    ("SamsungBrowser/", "Samsung Internet"),
    ("FxiOS/", "Firefox"),
    ("Firefox/", "Firefox"),
    ("CriOS/", "Chrome"),
    ("Chromium/", "Chromium"),
    ("Chrome/", "Chrome"),
    ("Safari/", "Safari"),
)
# Also in order: an iPhone's header says "like Mac OS X", an Android's says "Linux".
SYSTEMS: tuple[tuple[str, str], ...] = (
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Android", "Android"),
    ("CrOS", "ChromeOS"),
    ("Windows", "Windows"),
    ("Macintosh", "macOS"),
    ("Mac OS X", "macOS"),
    ("Linux", "Linux"),
)


def _first(header: str, table: tuple[tuple[str, str], ...]) -> str | None:
    return next((name for token, name in table if token in header), None)


def device_description(user_agent: str) -> str:
    """ "Chrome on macOS", "Firefox on Windows", "Unknown browser on Android", "Unknown
    browser"; "" when no header was recorded. In the active language."""
    header = (user_agent or "").strip()
    if not header:
        return ""
    browser, system = _first(header, BROWSERS), _first(header, SYSTEMS)
    if browser and system:
        return gettext("%(browser)s on %(system)s") % {"browser": browser, "system": system}
    if system:
        return gettext("Unknown browser on %(system)s") % {"system": system}
    return browser or gettext("Unknown browser")
