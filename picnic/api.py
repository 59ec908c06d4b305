"""Shared API plumbing: OAuth2 scope checks with clear errors."""

from __future__ import annotations

from oauth2_provider.contrib.rest_framework import TokenHasScope
from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.views import exception_handler as drf_exception_handler


class InsufficientScope(APIException):
    status_code = status.HTTP_403_FORBIDDEN
    default_code = "insufficient_scope"

    def __init__(self, required: list[str]):
        self.required = required
        super().__init__(
            detail=f"Insufficient scope: this call requires the scope {' '.join(required)}",
            code="insufficient_scope",
        )


class RequiredScopes(TokenHasScope):
    """TokenHasScope, but a token that lacks the scope gets a 403 that names it (RFC 6750 §3.1)."""

    def has_permission(self, request, view) -> bool:
        if super().has_permission(request, view):
            return True
        token = request.auth
        if token is not None and hasattr(token, "scope") and not token.is_expired():
            raise InsufficientScope(list(self.get_scopes(request, view)))
        return False


def exception_handler(exc, context):
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, InsufficientScope):
        response["WWW-Authenticate"] = (
            f'Bearer error="insufficient_scope", scope="{" ".join(exc.required)}"'
        )
        response.data["required_scopes"] = exc.required
    return response
