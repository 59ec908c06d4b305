"""Writes: a client's self-description and logo, an agent's last use, and revoking an agent."""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from oauth2_provider.models import (
    AbstractAccessToken,
    get_access_token_model,
    get_application_model,
    get_grant_model,
    get_refresh_token_model,
)

from core import outbound
from core.lifecycle import enqueue_on_commit
from oauth import logos
from oauth.models import AgentUse, ClientProfile
from oauth.policy import MAX_URI_LENGTH

logger = logging.getLogger(__name__)
# agent_use_record writes at most this often per process and agent.
USE_WRITE_SECONDS = 60.0
_last_written: dict[tuple[int, int], float] = {}
# A logo that could not be fetched is asked for again at most this often (by a page showing it).
LOGO_RETRY = timedelta(days=1)
LOGO_TASK = "oauth.tasks.client_logo_fetch"


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
    """Keep a client's home page and logo from its registration or metadata document. A new
    logo URL drops the logo we held and has the new one fetched, in the background."""
    logo = metadata.get("logo_uri")
    logo = logo if logos.logo_uri_allowed(logo) else ""
    previous = (
        ClientProfile.objects.filter(client_id=client_id).values_list("logo_uri", flat=True).first()
    )
    defaults = {"client_uri": _https_uri(metadata.get("client_uri")), "logo_uri": logo}
    if logo != previous:
        defaults |= {
            "logo_png": None,
            "logo_sha256": "",
            "logo_requested_at": timezone.now() if logo else None,
        }
    profile, _ = ClientProfile.objects.update_or_create(client_id=client_id, defaults=defaults)
    if logo and logo != previous:
        enqueue_on_commit(LOGO_TASK, profile.pk)
    return profile


def client_logo_shown(*, profile: ClientProfile | None) -> str | None:
    """The URL (on our origin) a page shows the client's logo under, or None: the page shows
    its monogram. A logo not fetched yet is asked for here, once (again after LOGO_RETRY)."""
    if profile is None or not profile.logo_uri:
        return None
    if profile.logo_sha256:
        return reverse("oauth-agents:logo", args=[profile.logo_sha256])
    now = timezone.now()
    asked = (
        ClientProfile.objects.filter(pk=profile.pk, logo_sha256="", logo_uri=profile.logo_uri)
        .filter(Q(logo_requested_at__isnull=True) | Q(logo_requested_at__lt=now - LOGO_RETRY))
        .update(logo_requested_at=now)
    )
    if asked:
        enqueue_on_commit(LOGO_TASK, profile.pk)
    return None


def application_logo_shown(application_id: int) -> str | None:
    """client_logo_shown for an OAuth application (what core.agent_logos asks)."""
    client_id = (
        get_application_model()
        .objects.filter(pk=application_id)
        .values_list("client_id", flat=True)
        .first()
    )
    profile = ClientProfile.objects.filter(client_id=client_id).first() if client_id else None
    return client_logo_shown(profile=profile)


def client_logo_fetch(*, profile_id: int) -> bool:
    """Fetch and re-encode a client's logo (oauth/logos.py) and keep it, unless its logo URL
    changed meanwhile. A refusal is logged with the client id and keeps the monogram."""
    profile = ClientProfile.objects.filter(pk=profile_id).only("client_id", "logo_uri").first()
    if profile is None or not profile.logo_uri:
        return False
    outbound.db_release()  # the fetch may take its whole deadline
    try:
        png = logos.reencode(logos.fetch(profile.logo_uri))
    except logos.LogoRefused as refusal:
        logger.warning(
            "agent logo refused: client %s, %s: %s", profile.client_id, profile.logo_uri, refusal
        )
        return False
    digest = hashlib.sha256(png).hexdigest()
    kept = ClientProfile.objects.filter(pk=profile.pk, logo_uri=profile.logo_uri).update(
        logo_png=png, logo_sha256=digest
    )
    return kept == 1


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


class MintRefused(ValueError):
    """A token was asked for an unknown user, client or scope: nothing was minted."""


def agent_token_mint(
    *, username: str, client_id: str, scopes: list[str], days: int, resource: list[str]
) -> AbstractAccessToken:
    """An access token for `username` through the registered client `client_id`, bound
    (RFC 8707) to `resource`: what `make run` prints, for a deployment with no demo data (the
    cluster, production) where nobody should open a shell to make one."""
    known = settings.OAUTH2_PROVIDER["SCOPES"]
    unknown = [s for s in scopes if s not in known]
    if unknown or not scopes:
        raise MintRefused(f"unknown scope(s) {', '.join(unknown) or '(none given)'}")
    if not 1 <= days <= 90:
        raise MintRefused("days must be between 1 and 90")
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise MintRefused(f"no active user {username!r}")
    application = get_application_model().objects.filter(client_id=client_id).first()
    if application is None:
        raise MintRefused(f"no registered client {client_id!r}")
    return get_access_token_model().objects.create(
        user=user,
        application=application,
        scope=" ".join(dict.fromkeys(scopes)),
        token=secrets.token_urlsafe(32),
        expires=timezone.now() + timedelta(days=days),
        resource=resource,
    )


@transaction.atomic
def user_tokens_revoke(*, user) -> Revoked:
    """Every agent of the user disconnected at once (the user was deactivated): what
    agent_revoke does for one agent, for all of them."""
    now = timezone.now()
    refreshed = (
        get_refresh_token_model()
        .objects.filter(user=user, revoked__isnull=True)
        .update(revoked=now, updated=now, access_token=None)
    )
    deleted, _ = get_access_token_model().objects.filter(user=user).delete()
    get_grant_model().objects.filter(user=user).delete()
    AgentUse.objects.filter(user=user).delete()
    for key in [k for k in _last_written if k[0] == user.pk]:
        _last_written.pop(key, None)
    return Revoked(access_tokens=deleted, refresh_tokens=refreshed)


def on_user_deactivated(sender, *, user, **kwargs) -> None:
    """Receiver of core.users.user_deactivated."""
    revoked = user_tokens_revoke(user=user)
    logger.info(
        "user %s deactivated: %d access and %d refresh tokens revoked",
        user.pk,
        revoked.access_tokens,
        revoked.refresh_tokens,
    )
