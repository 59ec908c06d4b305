"""Shared lifecycle models: the abstract entity every app's work item is, the append-only
status history it keeps, and the append-only guard that history and the credit ledger share."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone

if TYPE_CHECKING:  # for annotations only: core.lifecycle imports this module
    from core.lifecycle import Lifecycle


class ActorKind(models.TextChoices):
    SYSTEM = "system", "System"
    WORKER = "worker", "Worker"
    STAFF = "staff", "Staff"
    USER = "user", "End user"
    AGENT = "agent", "Agent"


class AppendOnlyError(RuntimeError):
    """A write that would change or remove an audit row (history, ledger)."""


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AppendOnlyError(f"{self.model._meta.verbose_name_plural} are append-only")

    def delete(self):
        raise AppendOnlyError(f"{self.model._meta.verbose_name_plural} are append-only")


class AppendOnly(models.Model):
    """Rows are added, never changed nor deleted one by one: `save()` of a stored row,
    `delete()`, and the default manager's `update()`/`delete()` raise AppendOnlyError.

    Deleting the row they belong to still cascades (Django's collector uses the base manager):
    that is how retention purges a finished action with its history.
    """

    append_only_rows: ClassVar[str] = "rows"  # what the error calls them

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnlyError(f"{self.append_only_rows} are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError(f"{self.append_only_rows} are append-only")


class LifecycleModel(models.Model):
    """A piece of work that moves through a `core.lifecycle.Lifecycle` (an action, a DM
    delivery, an operation). Each concrete model names its lifecycle (`lifecycle = …`) and keeps
    its own status field: their choices and defaults differ, and an operation's lifecycle field
    is `state` (its `status` is derived). `updated_at` is bumped by every transition and touch,
    which is what timelines poll on."""

    lifecycle: ClassVar[Lifecycle]

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # The W3C trace id of the request that created it: workers that pick the item up later
    # (beat) continue that trace (`core.tracing.adopt`). Searched through the history rows.
    trace_id = models.CharField(max_length=32, blank=True, default="", editable=False)

    class Meta:
        abstract = True

    @property
    def current_status(self) -> str:
        return getattr(self, self.lifecycle.status_field)

    @property
    def is_terminal(self) -> bool:
        return self.lifecycle.is_terminal(self.current_status)

    @property
    def resource_uri(self) -> str | None:
        return self.lifecycle.resource_uri(self.pk)


class StatusHistory(AppendOnly):
    """One row per status transition; never updated, never deleted one by one.

    Concrete subclasses add the foreign key to their entity (named by the lifecycle).
    """

    append_only_rows = "status history rows"

    from_status = models.CharField(max_length=32, null=True, blank=True)
    status = models.CharField(max_length=32)
    timestamp = models.DateTimeField(default=timezone.now, db_index=True)
    detail = models.TextField(null=True, blank=True)
    actor_kind = models.CharField(max_length=16, choices=ActorKind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # Raw provider payload (bundler receipt, API response) kept for support staff.
    payload = models.JSONField(null=True, blank=True)
    # The W3C trace id (the API's X-Request-ID) of the work that wrote the row; indexed so
    # support can find every row one request led to.
    trace_id = models.CharField(max_length=32, blank=True, default="", db_index=True)

    class Meta:
        abstract = True
        ordering = ("timestamp", "id")

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.status} at {self.timestamp:%Y-%m-%d %H:%M:%S}"
