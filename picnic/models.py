"""Shared lifecycle models: the append-only status history every app's entities keep."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ActorKind(models.TextChoices):
    SYSTEM = "system", "System"
    WORKER = "worker", "Worker"
    STAFF = "staff", "Staff"
    USER = "user", "End user"
    AGENT = "agent", "Agent"


class AppendOnlyError(RuntimeError):
    pass


class StatusHistory(models.Model):
    """One row per status transition; never updated, never deleted one by one.

    Concrete subclasses add the foreign key to their entity (named by the lifecycle).
    """

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

    class Meta:
        abstract = True
        ordering = ("timestamp", "id")

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.status} at {self.timestamp:%Y-%m-%d %H:%M:%S}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise AppendOnlyError("status history rows are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AppendOnlyError("status history rows are append-only")
