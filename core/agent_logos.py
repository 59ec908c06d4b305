"""Where an agent's logo is shown from. The oauth app holds the logos (fetched and served from
our own origin: oauth/logos.py) and registers its lookup here from AppConfig.ready(); the
signing page asks here, since the actions app may not import oauth (core/layers.py)."""

from __future__ import annotations

from collections.abc import Callable

_lookup: Callable[[int], str | None] | None = None


def register_logo_lookup(lookup: Callable[[int], str | None]) -> None:
    """`lookup(application_id)`: the URL of that OAuth client's logo on our origin, or None."""
    global _lookup
    _lookup = lookup


def agent_logo_url(application_id: int) -> str | None:
    """The URL of an agent's logo on our origin, or None: the page shows its monogram."""
    return _lookup(application_id) if _lookup is not None else None
