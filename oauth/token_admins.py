"""DOT's admins of access tokens, refresh tokens and grants, whose lists never count a whole
table (one row per sign-in and per refresh: the largest tables after the history).

Named by OAUTH2_PROVIDER's *_ADMIN_CLASS settings and imported only by DOT's admin module while
it registers them (its classes exist by then), never by Django's autodiscovery: this module
imports that one."""

from __future__ import annotations

from oauth2_provider import admin as dot_admin

from core.admin import EstimatedCountMixin


class AccessTokenAdmin(EstimatedCountMixin, dot_admin.AccessTokenAdmin):
    pass


class RefreshTokenAdmin(EstimatedCountMixin, dot_admin.RefreshTokenAdmin):
    pass


class GrantAdmin(EstimatedCountMixin, dot_admin.GrantAdmin):
    pass
