"""MCP tasks (protocol 2025-11-25 `tasks`, and the 2026-07-28 `io.modelcontextprotocol/tasks`
extension): one row per task-augmented tool call, in the database so a task outlives the MCP
server and web processes that created it.

A task is not a lifecycle of its own: it follows the entity its tool call created (an action,
a delivery), whose lifecycle is the audited one. The row keeps what the entity does not: the
authorization context that may read it (user + OAuth application of the access token), its
TTL, and, once the entity first reaches an end, the task's terminal snapshot (status, message,
result), frozen by a conditional update so a later staff resolution never rewrites it."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class TaskStatus(models.TextChoices):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    # A tool-level failure (the result has isError: true). Revision 2026-07-28 shows it as
    # `completed` with that result; `failed` there is kept for JSON-RPC errors, which a task of
    # ours never ends with.
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})


class TaskKind(models.TextChoices):
    ACTION = "action"  # the lifecycle names of core.lifecycle
    DELIVERY = "delivery"


class McpTask(models.Model):
    # uuid4: 122 random bits from os.urandom, so an id cannot be guessed (both revisions ask it).
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_tasks"
    )
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        on_delete=models.CASCADE,
        related_name="mcp_tasks",
    )
    tool = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=TaskKind.choices)
    # The action or delivery; null when the call itself was refused (a failed task from birth).
    entity_id = models.UUIDField(null=True, blank=True)
    protocol_version = models.CharField(max_length=16)
    status = models.CharField(max_length=16, choices=TaskStatus.choices)
    status_message = models.TextField(blank=True, default="")
    # The tool's first answer (the action's sign_url…), kept for the status message.
    accepted = models.JSONField(null=True, blank=True)
    # The CallToolResult the task ends with (tasks/result, or `result` in 2026-07-28).
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_updated_at = models.DateTimeField(default=timezone.now)
    ttl_ms = models.PositiveBigIntegerField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [
            models.Index(fields=["user", "application", "-created_at", "-id"]),
            models.Index(fields=["kind", "entity_id"]),
        ]

    def __str__(self) -> str:
        return f"task {self.pk} ({self.tool}, {self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL
