"""Writes: a client's self-description, an agent's last use, and revoking an agent."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.db import DatabaseError, transaction
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_grant_model, get_refresh_token_model

from oauth.models import AgentUse, ClientProfile
from oauth.policy import MAX_URI_LENGTH

logger = logging.getLogger(__name__)
# agent_use_record writes at most this often per process and agent.
USE_WRITE_SECONDS = 60.0
_last_written: dict[tuple[int, int], float] = {}


def _https_uri(value: object) -> str:
    """`value` if it is an https URL we would show (and load, for a logo), else ""."""
    if (
        isinstance(value, str)
        and value.startswith("https://")
        and len(value) <= MAX_URI_LENGTH
        and value.isprintable()
        and not any(c.isspace() for c in value)
    ):
        return value
    return ""


def client_profile_record(*, client_id: str, metadata: dict) -> ClientProfile:
    """Keep a client's home page and logo from its registration or metadata document."""
    profile, _ = ClientProfile.objects.update_or_create(
        client_id=client_id,
        defaults={
            "client_uri": _https_uri(metadata.get("client_uri")),
            "logo_uri": _https_uri(metadata.get("logo_uri")),
        },
    )
    return profile


def agent_use_record(*, user_id: int, application_id: int) -> None:
    """Note that a user's agent called the MCP server now; a no-op within USE_WRITE_SECONDS of this
    process's last write for the same agent, so a busy agent costs one UPDATE a minute."""
    key = (user_id, application_id)
    now = time.monotonic()
    if now - _last_written.get(key, -USE_WRITE_SECONDS) < USE_WRITE_SECONDS:
        return
    _last_written[key] = now
    # One INSERT … ON CONFLICT UPDATE: two processes writing at once is no error. A failure
    # here must not refuse a valid token: it only costs the page one timestamp.
    try:
        AgentUse.objects.bulk_create(
            [AgentUse(user_id=user_id, application_id=application_id, last_used_at=timezone.now())],
            update_conflicts=True,
            unique_fields=["user", "application"],
            update_fields=["last_used_at"],
        )
    except DatabaseError:
        logger.warning("could not record the last use of agent %s", application_id, exc_info=True)


@dataclass(frozen=True)
class Revoked:
    access_tokens: int
    refresh_tokens: int


@transaction.atomic
def agent_revoke(*, user, application_id: int) -> Revoked:
    """Disconnect one agent from one user at once: every refresh token revoked (a later use is
    refused), every access token and pending authorization code deleted (the next call with
    one is a 401, on the API and on the MCP server alike)."""
    now = timezone.now()
    refresh = get_refresh_token_model().objects.filter(
        user=user, application_id=application_id, revoked__isnull=True
    )
    refreshed = refresh.update(revoked=now, updated=now, access_token=None)
    deleted, _ = (
        get_access_token_model().objects.filter(user=user, application_id=application_id).delete()
    )
    get_grant_model().objects.filter(user=user, application_id=application_id).delete()
    AgentUse.objects.filter(user=user, application_id=application_id).delete()
    _last_written.pop((user.pk, application_id), None)
    return Revoked(access_tokens=deleted, refresh_tokens=refreshed)
