"""Throttles of the open OAuth endpoints, counted in the shared cache (core/throttle.py): one
count for every web process on Redis in production, per process on `make run`'s locmem.

- the token endpoint: OAUTH2_TOKEN_PER_MINUTE requests a minute from one client address
  (guessing codes, refresh tokens or client secrets), and OAUTH2_TOKEN_PER_CLIENT_PER_MINUTE
  for one client id from every address together (generous: the same guessing spread over many
  addresses; the address is the real one, core/proxy.py);
- Client ID Metadata Document fetches: OAUTH2_CIMD_FETCHES_PER_MINUTE a minute for one host
  of client ids, checked before DOT fetches anything (as a CIMD registration permission,
  DOT's own pre-fetch gate, so a refusal is not a failed fetch and sets no backoff);
- registration: oauth/registration.py (OAUTH2_DCR_PER_HOUR); login: core/login.py.
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote_plus, urlsplit

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


def _client_id(request) -> str:
    """The client id a token request names: HTTP Basic's user (form-encoded, RFC 6749
    §2.3.1) or the body's `client_id`; "" when none (DOT refuses the request itself)."""
    scheme, _, credentials = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return ""
        return unquote_plus(decoded.partition(":")[0])
    return getattr(request, "POST", {}).get("client_id", "")


def token_refusal(request) -> JsonResponse | None:
    """429 once this address, or the client id it names, passed its token requests for the
    minute, else None."""
    address = request.META.get("REMOTE_ADDR", "")
    if throttle.hit("token", address, window_seconds=60) > settings.OAUTH2_TOKEN_PER_MINUTE:
        return too_many("Too many token requests from this address: try again in a minute", 60)
    client_id = _client_id(request)
    if client_id:
        used = throttle.hit("token-client", client_id, window_seconds=60)
        if used > settings.OAUTH2_TOKEN_PER_CLIENT_PER_MINUTE:
            return too_many("Too many token requests for this client: try again in a minute", 60)
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
