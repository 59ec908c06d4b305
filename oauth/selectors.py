"""Reads: a user's connected agents, and how a client presents itself."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Q
from django.db.models.query import get_related_populators
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


# --- The bearer token and the view's own read, in one statement ---------------------------

_TOKEN_SENTINEL = "0" * 64
_token_plans: dict[str, tuple] = {}


def _token_plan(using: str) -> tuple:
    """DOT's read of a bearer token (with its application and user, as `select_related`
    loads them), compiled once per database with a placeholder checksum, and what turns its
    columns into the three instances (the compiler's own populators)."""
    if using not in _token_plans:
        tokens = get_access_token_model()._default_manager
        query = (
            tokens.select_related("application", "user")
            .filter(token_checksum=_TOKEN_SENTINEL)
            .order_by("pk")[:1]
        )
        compiler = query.query.get_compiler(using)
        sql, params = compiler.as_sql()
        params = list(params)
        at = params.index(_TOKEN_SENTINEL)
        klass_info, select = compiler.klass_info, compiler.select
        fields = klass_info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        _token_plans[using] = (
            sql,
            params,
            at,
            # {position: (converters, column)}; applied with the caller's connection.
            compiler.get_converters([column[0] for column in select]),
            len(select),
            (start, end),
            [column[0].target.attname for column in select[start:end]],
            get_related_populators(klass_info, select, using),
        )
    return _token_plans[using]


def access_token_with(*, token_checksum: str, sql: str, params: list) -> tuple[Any, tuple | None]:
    """The access token of `token_checksum` (None if there is none) and the one row of `sql`
    (None if it has none), read in one statement: one round trip where a view would
    otherwise read the token, then its own row. `sql` must not depend on the token."""
    tokens = get_access_token_model()._default_manager
    using = tokens.db
    connection = connections[using]
    plan_sql, plan_params, at, converters, width, (start, end), names, populators = _token_plan(
        using
    )
    values = list(plan_params)
    values[at] = token_checksum
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT * FROM (SELECT 1) AS one LEFT JOIN ({plan_sql}) AS t ON true "
            f"LEFT JOIN ({sql}) AS companion ON true",
            [*values, *params],
        )
        row = cursor.fetchone()
    token_row, companion = row[1 : 1 + width], row[1 + width :]
    token = None
    if token_row[start] is not None:  # the token's primary key
        token_row = list(token_row)
        for index, (functions, expression) in converters.items():
            for convert in functions:
                token_row[index] = convert(token_row[index], expression, connection)
        token = tokens.model.from_db(using, names, token_row[start:end])
        for populator in populators:
            populator.populate(token_row, token)
    return token, (companion if any(value is not None for value in companion) else None)
