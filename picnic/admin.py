"""Admin pieces shared by every app's back-office."""

from __future__ import annotations

from django.contrib import admin


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class StatusHistoryInline(ReadOnlyInline):
    """The append-only status history (picnic.models.StatusHistory), raw payloads included."""

    fields = ("timestamp", "from_status", "status", "detail", "actor_kind", "actor_user", "payload")
    readonly_fields = fields
    ordering = ("timestamp", "id")
