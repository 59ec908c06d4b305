"""The API's bearer authentication: DOT's, but a token that was sent and refused is a 401
that says why (RFC 6750 §3.1 `invalid_token`), not "credentials were not provided"."""

from __future__ import annotations

from drf_spectacular.contrib.django_oauth_toolkit import DjangoOAuthToolkitScheme
from oauth2_provider.contrib.rest_framework import OAuth2Authentication
from rest_framework.exceptions import AuthenticationFailed

# DOT's descriptions, in words an agent (or its developer) can act on. DOT cannot tell a
# revoked token from one never issued: revoking deletes it (oauth.services.agent_revoke).
_SAID = {
    "The access token is invalid.": (
        "The access token is not valid: it was revoked (the user disconnected this agent) "
        "or never issued. Authorize again."
    ),
    "The access token has expired.": (
        "The access token has expired. Use the refresh token, or authorize again."
    ),
}


class BearerAuthentication(OAuth2Authentication):
    def authenticate(self, request):
        found = super().authenticate(request)
        if found is not None or not _bearer_sent(request):
            return found
        error = getattr(request, "oauth2_error", None) or {}
        if error.get("error") != "invalid_token":
            return None
        described = str(error.get("error_description") or "The access token is not valid.")
        said = _SAID.get(described, described)
        # The WWW-Authenticate challenge (authenticate_header) carries the same words.
        request.oauth2_error = {"error": "invalid_token", "error_description": said}
        raise AuthenticationFailed(said, code="invalid_token")


def _bearer_sent(request) -> bool:
    scheme, _, token = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return scheme.lower() == "bearer" and bool(token.strip())


class BearerAuthenticationScheme(DjangoOAuthToolkitScheme):
    """The OpenAPI security scheme stays DOT's (drf-spectacular matches the class exactly)."""

    target_class = "oauth.authentication.BearerAuthentication"
