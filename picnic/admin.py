"""Admin pieces shared by every app's back-office. What is per kind of work (its history model,
its live timeline) comes from the lifecycle registry (`picnic.lifecycle`), not from each app."""

from __future__ import annotations

from functools import cache

from django.contrib import admin
from django.utils.html import format_html

from picnic.lifecycle import Lifecycle, lifecycle_named, lifecycles


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class StatusHistoryInline(ReadOnlyInline):
    """The append-only status history (picnic.models.StatusHistory), raw payloads included."""

    fields = (
        "timestamp",
        "from_status",
        "status",
        "detail",
        "actor_kind",
        "actor_user",
        "trace_id",  # the request id (X-Request-ID) to search the logs by
        "payload",
    )
    readonly_fields = fields
    ordering = ("timestamp", "id")


@cache
def _history_inline(name: str) -> type[StatusHistoryInline]:
    model = lifecycle_named(name).history_model
    return type(f"{model.__name__}Inline", (StatusHistoryInline,), {"model": model})


def history_inline(lifecycle: Lifecycle) -> type[StatusHistoryInline]:
    """The history inline of a registered lifecycle's entity (one class per lifecycle)."""
    return _history_inline(lifecycle.name)


class LifecycleAdmin(admin.ModelAdmin):
    """The admin of an entity with a lifecycle: read-only (its status changes only through
    transitions, i.e. admin actions calling services; it is created by its API, never by hand),
    its history inline last, and a link to its live timeline."""

    lifecycle: Lifecycle

    def get_inlines(self, request, obj):
        return [*super().get_inlines(request, obj), history_inline(self.lifecycle)]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def timeline_link(self, obj, text: str = "live timeline") -> str:
        return format_html('<a href="{}">{}</a>', self.lifecycle.timeline_url(obj.pk), text)


def tracked_work(user) -> list[dict]:
    """Every registered kind of work the user may view, with its admin list and how many are
    not finished: the admin index shows them above the apps."""
    rows = []
    for lifecycle in lifecycles():
        meta = lifecycle.model._meta
        if not user.has_perm(f"{meta.app_label}.view_{meta.model_name}"):
            continue
        unfinished = lifecycle.model._default_manager.exclude(
            **{f"{lifecycle.status_field}__in": lifecycle.terminal}
        )
        rows.append(
            {
                "name": lifecycle.name,
                "label": meta.verbose_name_plural,
                "url": lifecycle.admin_url(),
                "unfinished": unfinished.count(),
            }
        )
    return rows
