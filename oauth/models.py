"""What django-oauth-toolkit's Application does not keep: how a self-registered agent presents
itself (home page, logo), and when each user's agent last used its tokens."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ClientProfile(models.Model):
    """A client's own words from its registration (RFC 7591) or its metadata document (CIMD):
    self-asserted, so the consent page shows them as such. Keyed by client id, not by a foreign
    key: a metadata document is read before DOT writes the Application row."""

    client_id = models.CharField(max_length=255, unique=True)
    client_uri = models.URLField(max_length=2000, blank=True)
    logo_uri = models.URLField(max_length=2000, blank=True)
    # The logo as we serve it (oauth/logos.py): our own PNG of the image at logo_uri, its
    # SHA-256 (the name it is served under, so it is cached forever), and when a fetch was
    # asked for (one at a time: a page that shows the agent asks only if none was).
    logo_png = models.BinaryField(null=True, blank=True, editable=False)
    logo_sha256 = models.CharField(max_length=64, blank=True, db_index=True, editable=False)
    logo_requested_at = models.DateTimeField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return self.client_id


class AgentUse(models.Model):
    """When a user's agent (one OAuth client) last called the MCP server with its token.
    Written at most once a minute per process and agent (oauth.services.agent_use_record), by
    the MCP server's token check, so the API's request path stays as it was."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL, on_delete=models.CASCADE
    )
    last_used_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "application"], name="oauth_agentuse_unique")
        ]

    def __str__(self):
        return f"{self.user_id} / {self.application_id}: {self.last_used_at:%Y-%m-%d %H:%M}"
