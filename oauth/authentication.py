"""The API's bearer-token authentication: django-oauth-toolkit's, whose audience rule is
ours (oauth.policy.api_accepts_audience, set as RESOURCE_SERVER_TOKEN_RESOURCE_VALIDATOR),
plus the agent's last use for the "Connected agents" page."""

from __future__ import annotations

from drf_spectacular.contrib.django_oauth_toolkit import DjangoOAuthToolkitScheme
from oauth2_provider.contrib.rest_framework import OAuth2Authentication

from oauth.services import agent_use_record


class AgentAuthentication(OAuth2Authentication):
    def authenticate(self, request):
        result = super().authenticate(request)
        if result is not None:
            user, token = result
            if user is not None and token.application_id is not None:
                agent_use_record(user_id=user.pk, application_id=token.application_id)
        return result


class AgentAuthenticationScheme(DjangoOAuthToolkitScheme):
    """The OpenAPI security scheme of the class above: DOT's (drf-spectacular matches the
    exact class only)."""

    target_class = "oauth.authentication.AgentAuthentication"
