"""MCP tasks in the admin, read-only: support staff answering "my agent says its task is stuck"
find the task by its id (or the action's or delivery's id), see whose it is, what it waits for
and how it ended, and follow the link to the entity's live timeline, where any fix is made."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from core.admin import (
    EstimatedCountMixin,
    ExactSearchMixin,
    ReadOnlyAdminMixin,
    id_cell,
    text_cell,
)
from core.lifecycle import lifecycle_named
from mcp_adapter.models import McpTask


# A task mirrors its action or delivery and ends with it: nothing to edit or add here, and the
# purge (TTL) is beat's job.
@admin.register(McpTask)
class McpTaskAdmin(EstimatedCountMixin, ExactSearchMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "short_id",
        "tool",
        "status",
        "user",
        "application",
        "entity",
        "message",
        "created_at",
        "expires_at",
    )
    # Choices only: a filter on a free field would run SELECT DISTINCT on every load.
    list_filter = ("status", "kind")
    list_select_related = ("user", "application")
    search_fields = ("=id",)
    search_help_text = "Exact: a task id, or the id of its action or delivery."
    ordering = ("-created_at", "-id")
    list_per_page = 50
    readonly_fields = [f.name for f in McpTask._meta.concrete_fields] + ["entity"]

    def search_exact(self, queryset, kind, value, term):
        if kind != "uuid":
            return queryset.none()
        return queryset.filter(pk=value) | queryset.filter(entity_id=value)

    @admin.display(description="id")
    def short_id(self, obj: McpTask) -> str:
        return id_cell(obj.pk)

    @admin.display(description="status message")
    def message(self, obj: McpTask) -> str:
        return text_cell(obj.status_message, limit=60)

    @admin.display(description="action / delivery")
    def entity(self, obj: McpTask) -> str:
        if obj.entity_id is None:
            return "— (refused at once)"
        url = lifecycle_named(obj.kind).timeline_url(obj.entity_id)
        return format_html('<a href="{}">{} {}</a>', url, obj.kind, id_cell(obj.entity_id))
