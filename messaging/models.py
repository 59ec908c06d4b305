from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.lifecycle import Lifecycle, register
from core.models import LifecycleModel, StatusHistory


class Workspace(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    AGENT = "agent", "Agent (may send)"
    VIEWER = "viewer", "Viewer (read only)"


SEND_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.AGENT})
MANAGE_ROLES = frozenset({Role.OWNER, Role.ADMIN})


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workspace_memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} is {self.role} of {self.workspace}"


class Provider(models.TextChoices):
    X = "x", "X (Twitter) Direct Messages"


class SocialAccount(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(
        Workspace, on_delete=models.PROTECT, related_name="social_accounts"
    )
    provider = models.CharField(max_length=16, choices=Provider.choices)
    handle = models.CharField(max_length=100)
    # The OAuth user token is never stored here: a reference ("env:NAME") resolved at send
    # time, so the secret lives in the deployment's secret store and never reaches the API.
    credential_ref = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "provider", "handle"], name="social_account_unique"
            ),
            models.CheckConstraint(
                condition=Q(credential_ref__startswith="env:"), name="social_account_credential_ref"
            ),
        ]

    def __str__(self) -> str:
        return f"@{self.handle} ({self.provider})"


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    social_account = models.ForeignKey(
        SocialAccount, on_delete=models.PROTECT, related_name="conversations"
    )
    recipient_id = models.CharField(max_length=64, help_text="The provider's participant id.")
    provider_conversation_id = models.CharField(max_length=128, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["social_account", "recipient_id"], name="conversation_unique"
            )
        ]
        # The admin's exact recipient search (the constraint leads with the account).
        indexes = [models.Index(fields=["recipient_id"], name="conversation_recipient")]

    def __str__(self) -> str:
        return f"{self.social_account} → {self.recipient_id}"


class DeliveryStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    CLAIMED = "claimed", "Claimed"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    UNKNOWN = "unknown", "Unknown"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


D = DeliveryStatus
# `claimed` means the request has not left: a connection refused keeps it `claimed` (retried
# later); `sending` is committed before the first byte goes out, so anything that goes wrong
# after it is `unknown`, never re-sent automatically. Only staff resolve `unknown`.
DELIVERY_LIFECYCLE = register(
    Lifecycle(
        name="delivery",
        model_label="messaging.Delivery",
        history_label="messaging.DeliveryStatusHistory",
        moves={
            D.QUEUED: frozenset({D.CLAIMED, D.CANCELLED}),
            D.CLAIMED: frozenset({D.SENDING, D.CANCELLED, D.FAILED}),
            D.SENDING: frozenset({D.SENT, D.FAILED, D.UNKNOWN}),
            D.UNKNOWN: frozenset({D.SENT, D.FAILED}),
            D.SENT: frozenset(),
            D.FAILED: frozenset(),
            D.CANCELLED: frozenset(),
        },
        history_fk="delivery",
        # Not an MCP resource: agents follow a delivery with sosoapi_dm_actions_status.
        resource_uri_template=None,
        timeline_url_name="messaging-staff:delivery-timeline",
        stuck_selector="messaging.selectors.deliveries_stuck",
    )
)
CANCELLABLE = frozenset({D.QUEUED, D.CLAIMED})
# Not done with, by a worker or by staff: where stuck work is (the partial indexes below).
# Said as "none of the ended statuses": PostgreSQL proves that each branch of the stuck
# list's OR implies this (each of its statuses is none of them), not that it implies an IN of
# the open ones (it wants every branch to imply one value of such a list).
OPEN_DELIVERIES = ~Q(status__in=[D.SENT, D.FAILED, D.CANCELLED])


class Delivery(LifecycleModel):
    """A DM delivery action (`action` in the private-messaging/v1 contract)."""

    lifecycle = DELIVERY_LIFECYCLE

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="deliveries")
    social_account = models.ForeignKey(
        SocialAccount, on_delete=models.PROTECT, related_name="deliveries"
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.PROTECT, related_name="deliveries"
    )
    text = models.TextField()
    idempotency_key = models.UUIDField()
    payload_hash = models.CharField(max_length=64)
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=D.QUEUED, db_index=True
    )
    provider_message_id = models.CharField(max_length=128, null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="dm_deliveries"
    )
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="dm_deliveries",
    )

    # Worker bookkeeping: who holds the claim, until when, and connection attempts that
    # provably never sent anything.
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ("-created_at",)
        verbose_name_plural = "deliveries"
        permissions = [
            ("cancel_delivery", "Can cancel queued or claimed deliveries"),
            ("resolve_delivery", "Can resolve an unknown delivery as sent or failed"),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="delivery_due"),
            # Back-office (admin): the list's order, each status filter in that order, and the
            # exact id searches (the unique constraint leads with workspace, not the key).
            models.Index(fields=["created_at"], name="delivery_created"),
            models.Index(fields=["status", "created_at"], name="delivery_status_created"),
            models.Index(fields=["idempotency_key"], name="delivery_idempotency_key"),
            models.Index(fields=["provider_message_id"], name="delivery_provider_message_id"),
            # The console's search by owner: a user's newest first, read only up to its limit.
            models.Index(fields=["created_by", "-created_at"], name="delivery_creator_created"),
            # Stuck work (`deliveries_stuck`: every branch of its OR is one of these statuses)
            # in each list's order, so a list reads its page, not every open delivery: oldest
            # change first (the console), newest first (the admin's "stuck" filter).
            models.Index(
                fields=["updated_at"], name="delivery_open_updated", condition=OPEN_DELIVERIES
            ),
            # The same list filtered by owner: the owner's unfinished rows, oldest change first
            # (the owner's rows AND-ed with every unfinished row grew with both).
            models.Index(
                fields=["created_by", "updated_at"],
                name="delivery_open_owner_updated",
                condition=OPEN_DELIVERIES,
            ),
            models.Index(
                fields=["-created_at", "-id"],
                name="delivery_open_created",
                condition=OPEN_DELIVERIES,
            ),
        ]
        constraints = [
            # Keys are scoped to workspace + social account; concurrent duplicates lose here.
            models.UniqueConstraint(
                fields=["workspace", "social_account", "idempotency_key"],
                name="delivery_idempotency_key_unique",
            ),
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status=D.SENT) | Q(provider_message_id__isnull=False),
                name="delivery_sent_has_message_id",
            ),
        ]

    def __str__(self) -> str:
        return f"DM {self.id} ({self.status})"


class DeliveryStatusHistory(StatusHistory):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="history")

    class Meta(StatusHistory.Meta):
        verbose_name_plural = "delivery status history"
