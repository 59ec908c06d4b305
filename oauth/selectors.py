"""Reads: a user's connected agents, and how a client presents itself."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from django.db.models import Q
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_refresh_token_model

from oauth.models import AgentUse, ClientProfile
from oauth.scopes import ACT, READ, WRITE_ACTIONS_WITH_PERMISSIONS, ScopeWords, scope_words


@dataclass(frozen=True)
class ConnectedAgent:
    application: object
    profile: ClientProfile | None
    scopes: list[str]
    connected_at: datetime
    last_used_at: datetime | None
    logo_url: str | None = None  # set by the page (oauth.services.client_logo_shown)
    # Its active spending permissions (core.agents.agents_listed): what moves with no prompt.
    permissions: tuple = ()

    @property
    def initial(self) -> str:
        """The monogram shown until (or unless) we hold the agent's logo."""
        return (self.application.name or self.application.client_id or "?")[:1].upper()

    @property
    def reads(self) -> list[ScopeWords]:
        return [w for w in scope_words(self.scopes) if w.kind == READ]

    @property
    def acts(self) -> list[ScopeWords]:
        words = [w for w in scope_words(self.scopes) if w.kind == ACT]
        if not self.permissions:
            return words
        return [
            replace(w, text=WRITE_ACTIONS_WITH_PERMISSIONS) if w.name == "write:actions" else w
            for w in words
        ]


def client_profile(client_id: str) -> ClientProfile | None:
    return ClientProfile.objects.filter(client_id=client_id).first()


def client_logo_png(digest: str) -> bytes | None:
    """The PNG we keep under SHA-256 `digest` (oauth/logos.py), or None."""
    if len(digest) != 64:
        return None
    png = (
        ClientProfile.objects.filter(logo_sha256=digest).values_list("logo_png", flat=True).first()
    )
    return bytes(png) if png is not None else None


def connected_agents(*, user) -> list[ConnectedAgent]:
    """Every client holding a live token of `user` (an unexpired access token, or a refresh
    token not revoked): what it may do (the union of those tokens' scopes), since when, and
    when it last called the MCP server."""
    now = timezone.now()
    live_refresh = get_refresh_token_model().objects.filter(user=user, revoked__isnull=True)
    tokens = (
        get_access_token_model()
        .objects.filter(user=user, application__isnull=False)
        .filter(Q(expires__gt=now) | Q(refresh_token__in=live_refresh))
        .select_related("application")
        .order_by("created")
    )
    agents: dict[int, dict] = {}
    for token in tokens:
        entry = agents.setdefault(
            token.application_id,
            {"application": token.application, "scopes": {}, "connected_at": token.created},
        )
        entry["scopes"].update(dict.fromkeys(token.scope.split()))
    # A refresh token whose access token is gone (expired and cleared) still connects.
    for refresh in live_refresh.filter(access_token__isnull=True).select_related("application"):
        agents.setdefault(
            refresh.application_id,
            {"application": refresh.application, "scopes": {}, "connected_at": refresh.created},
        )
    profiles = {
        p.client_id: p
        for p in ClientProfile.objects.filter(
            client_id__in=[a["application"].client_id for a in agents.values()]
        )
    }
    uses = dict(
        AgentUse.objects.filter(user=user, application_id__in=agents).values_list(
            "application_id", "last_used_at"
        )
    )
    return [
        ConnectedAgent(
            application=entry["application"],
            profile=profiles.get(entry["application"].client_id),
            scopes=list(entry["scopes"]),
            connected_at=entry["connected_at"],
            last_used_at=uses.get(app_id),
        )
        for app_id, entry in sorted(agents.items(), key=lambda item: item[1]["connected_at"])
    ]
