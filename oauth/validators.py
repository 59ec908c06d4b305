"""django-oauth-toolkit's validator with our rules: only the grants agents need, RFC 8707
resource indicators only for the resource we serve, and no unbound token (issued or
accepted)."""

from __future__ import annotations

import hashlib
import re

from django.db import connections
from oauth2_provider.models import get_access_token_model
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauthlib.oauth2.rfc6749 import errors

from core.echo import PREFIX_CHARS, prefix
from core.token_reads import token_companion
from oauth.policy import api_resource, resource_served
from oauth.selectors import access_token_with

# A quoted value in an error description longer than core.echo's prefix.
_QUOTED = re.compile(f"'([^']{{{PREFIX_CHARS + 1},}})'")

# The code flow (with PKCE) and its refresh: what every MCP client uses. The metadata
# advertises exactly these (settings.OAUTH2_PROVIDER["OAUTH2_GRANT_TYPES_SUPPORTED"]).
GRANT_TYPES = ("authorization_code", "refresh_token")


def unserved_resource_error(resource: str, request=None, state=None) -> errors.CustomOAuth2Error:
    return errors.CustomOAuth2Error(
        error="invalid_target",
        description=f"This server issues no tokens for the resource {prefix(resource)}",
        request=request,
        state=state,
    )


def _token_database() -> str:
    return get_access_token_model()._default_manager.db


class PicnicOAuth2Validator(OAuth2Validator):
    def validate_grant_type(self, client_id, grant_type, client, request, *args, **kwargs):
        if grant_type not in GRANT_TYPES:
            return False
        return super().validate_grant_type(client_id, grant_type, client, request, *args, **kwargs)

    def _check_and_set_request_resource(self, request):
        """DOT's checks (absolute URIs; a token asks for no more than its grant) and ours: a
        token names only resources we serve (the authorization view checks the grant's)."""
        try:
            super()._check_and_set_request_resource(request)
        except errors.CustomOAuth2Error as exc:
            # DOT's descriptions quote the resource whole: keep a short prefix of it.
            exc.description = _QUOTED.sub(lambda m: prefix(m.group(1)), exc.description or "")
            raise
        api = api_resource()
        for resource in request.resource:
            # The API's own audience comes back on a refresh of a token that had it.
            if not (resource_served(resource) or resource == api):
                raise unserved_resource_error(resource, request)
        if not request.resource:
            # Asked for nothing (not at authorization, not now, not by the refreshed token):
            # a token for the API alone, never an unbound one the MCP server or another
            # resource server could be handed.
            request.resource = [api_resource()]

    def validate_bearer_token(self, token, scopes, request):
        """DOT's checks (DOT audience-checks only bound tokens), then: an unbound token (made
        before tokens were always bound, or by hand in the admin) is refused."""
        if not super().validate_bearer_token(token, scopes, request):
            return False
        user = request.access_token.user
        if user is not None and not user.is_active:
            # Deactivated means stopped: the tokens are deleted then, and one that survived (a
            # receiver that failed, a queryset update) is refused here all the same.
            request.oauth2_error = {
                "error": "invalid_token",
                "error_description": "The access token's user is deactivated",
            }
            return False
        if not request.access_token.resource:
            request.oauth2_error = {
                "error": "invalid_token",
                "error_description": "The access token is bound to no resource (RFC 8707)",
            }
            return False
        return True

    def _load_access_token(self, token):
        """DOT's read, or, when the view named its own read (`core.token_reads`), both in one
        statement: one round trip to PostgreSQL per request instead of two."""
        companion = token_companion()
        if companion is None or connections[_token_database()].vendor != "postgresql":
            return super()._load_access_token(token)
        found, companion.row = access_token_with(
            token_checksum=hashlib.sha256(token.encode("utf-8")).hexdigest(),
            sql=companion.sql,
            params=companion.params,
        )
        companion.read = True
        return found

    def validate_refresh_token(self, refresh_token, client, request, *args, **kwargs):
        """DOT's checks, then: a deactivated user's refresh token gets nothing
        (invalid_grant)."""
        if not super().validate_refresh_token(refresh_token, client, request, *args, **kwargs):
            return False
        return request.user is None or request.user.is_active

    def validate_code(self, client_id, code, client, request, *args, **kwargs):
        """DOT's checks, then: a code a deactivated user approved buys no token."""
        if not super().validate_code(client_id, code, client, request, *args, **kwargs):
            return False
        return request.user is None or request.user.is_active
