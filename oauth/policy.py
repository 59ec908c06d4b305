"""Who may register which redirect URI, and which RFC 8707 audiences we issue and accept.

Two audiences. The MCP server (`MCP_RESOURCE_URL`): the one resource a client may ask for by
name. The API (this web origin, `PUBLIC_BASE_URL`): what a token asked for without `resource`
is bound to, so no token is ever unbound. The MCP server accepts only its own; the API accepts
its own and the MCP server's (its tools are calls to the API made with the caller's token, so
the API serves that resource). An unbound token (an old one, one made in the admin without a
resource) and a token bound to anything else are refused by both.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from oauth2_provider.oauth2_validators import validate_resource_as_url_prefix

from core.echo import prefix

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
MAX_URI_LENGTH = 2000


def canonical(uri: str) -> str:
    """An RFC 8707 resource as compared here: scheme and host lowercased, no trailing slash
    (the MCP spec's canonical server URI), so `HTTP://Host/mcp/` names `http://host/mcp`."""
    parts = urlsplit(uri)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def served_resources() -> set[str]:
    """The resources this authorization server issues tokens for (read per call: the MCP
    resource comes from settings, which tests change)."""
    return {canonical(settings.MCP_RESOURCE_URL)}


def resource_served(uri: str) -> bool:
    try:
        return canonical(uri) in served_resources()
    except ValueError:  # an unparsable authority (a bad IPv6 literal, a bad port)
        return False


def api_resource() -> str:
    """The API's audience: the web origin (what the root protected-resource document names),
    given to every token asked for without `resource`."""
    return canonical(settings.PUBLIC_BASE_URL)


def api_accepts_audience(request_uri: str, audiences: list[str]) -> bool:
    """DOT's RESOURCE_SERVER_TOKEN_RESOURCE_VALIDATOR for the DRF API: the token names the API
    (this origin, or DOT's prefix match on the request's URL) or the MCP resource whose calls
    the API serves. Unbound tokens never get here: the validator refuses them first. Never a
    pass-through: the adapter sends tokens to MCP_API_URL only."""
    if validate_resource_as_url_prefix(request_uri, audiences):
        return True
    return any(
        isinstance(a, str) and (resource_served(a) or _canonical_or_none(a) == api_resource())
        for a in audiences
    )


def _canonical_or_none(uri: str) -> str | None:
    try:
        return canonical(uri)
    except ValueError:
        return None


def redirect_uri_problem(uri: object, *, client_id: str | None = None) -> str | None:
    """Why a self-registered client may not use `uri` as a redirect URI, or None: the one
    policy of dynamically registered clients and of Client ID Metadata Documents (`client_id`,
    the document's URL).

    - No fragment, no user information, no spaces or control characters, at most
      MAX_URI_LENGTH characters.
    - Loopback callbacks (RFC 8252 §7.3: http or https on 127.0.0.1, localhost or [::1]) are
      for agents on the user's machine.
    - Any other URI is listed exactly in OAUTH2_DCR_REDIRECT_URIS (the hosted clients the
      operator lets in; https or a private-use scheme, checked at start) or, for a metadata
      document, is https on the document's own host (the host the consent page names).
    Authorization then matches the registered URI exactly (DOT's check)."""
    if not isinstance(uri, str):
        return "each redirect URI must be a string"
    if not uri or len(uri) > MAX_URI_LENGTH:
        return f"each redirect URI must have 1 to {MAX_URI_LENGTH} characters"
    if not uri.isprintable() or any(c.isspace() for c in uri):
        return "a redirect URI must not contain spaces or control characters"
    if uri in settings.OAUTH2_DCR_REDIRECT_URIS:  # checked at start (https or private-use)
        return None
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return f"{prefix(uri)} is not a valid URI"
    if parts.fragment or "#" in uri or parts.username is not None or parts.password is not None:
        return f"{prefix(uri)}: a redirect URI has no fragment and no user information"
    if parts.scheme in ("http", "https") and parts.hostname in LOOPBACK_HOSTS:
        return None
    if parts.scheme == "https" and client_id is not None and parts.hostname:
        if parts.hostname == _hostname(client_id):
            return None
    return (
        f"{prefix(uri)} is not allowed: use a loopback callback (http://127.0.0.1:<port>/…), "
        "an https URI on the metadata document's host, or ask the operator to add it to "
        "OAUTH2_DCR_REDIRECT_URIS"
    )


def _hostname(uri: str) -> str | None:
    try:
        return urlsplit(uri).hostname
    except ValueError:
        return None


def is_loopback(uri: str) -> bool:
    try:
        return urlsplit(uri).hostname in LOOPBACK_HOSTS
    except ValueError:
        return False
