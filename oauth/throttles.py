"""Throttles of the open OAuth endpoints, counted in the shared cache (core/throttle.py): one
count for every web process on Redis in production, per process on `make run`'s locmem.

- the token endpoint: OAUTH2_TOKEN_PER_MINUTE requests a minute from one client address
  (guessing codes, refresh tokens or client secrets);
- Client ID Metadata Document fetches: OAUTH2_CIMD_FETCHES_PER_MINUTE a minute for one host
  of client ids, checked before DOT fetches anything (as a CIMD registration permission,
  DOT's own pre-fetch gate, so a refusal is not a failed fetch and sets no backoff);
- registration: oauth/registration.py (OAUTH2_DCR_PER_HOUR); login: core/login.py.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.http import JsonResponse

from core import throttle


def too_many(description: str, retry_after: int) -> JsonResponse:
    """429 in the OAuth error shape (RFC 6749 §5.2's body; the code RFC 6585's)."""
    response = JsonResponse(
        {"error": "too_many_requests", "error_description": description}, status=429
    )
    response["Retry-After"] = str(retry_after)
    response["Cache-Control"] = "no-store"
    return response


def token_refusal(request) -> JsonResponse | None:
    """429 once this address passed its token requests for the minute, else None."""
    address = request.META.get("REMOTE_ADDR", "")
    if throttle.hit("token", address, window_seconds=60) > settings.OAUTH2_TOKEN_PER_MINUTE:
        return too_many("Too many token requests from this address: try again in a minute", 60)
    return None


class CimdFetchBudget:
    """A CIMD registration permission: DOT fetches a client id's document only while its host
    is within its fetches for the minute (else the client is unknown for now)."""

    def has_permission(self, request, client_id) -> bool:
        try:
            host = (urlsplit(client_id).hostname or "").casefold()
        except ValueError:  # DOT refuses the URL itself
            return True
        used = throttle.hit("cimd-fetch", host, window_seconds=60)
        return used <= settings.OAUTH2_CIMD_FETCHES_PER_MINUTE
