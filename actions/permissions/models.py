"""Spending permissions: what an agent may spend without a passkey prompt, their lifecycle
and history."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils.translation import gettext_lazy as _

from actions.accounts.models import SmartAccount, Token
from actions.execution.models import Action
from core.lifecycle import Lifecycle, register
from core.models import LifecycleModel, StatusHistory


class SpendPeriod(models.TextChoices):
    DAILY = "daily", "day"
    WEEKLY = "weekly", "week"
    MONTHLY = "monthly", "month (30 days)"


# The contract counts a period in seconds from the permission's start.
PERIOD_SECONDS = {
    SpendPeriod.DAILY: 86400,
    SpendPeriod.WEEKLY: 604800,
    SpendPeriod.MONTHLY: 2592000,
}


class SpendPermissionStatus(models.TextChoices):
    REQUESTED = "requested", _("Requested")
    GRANTING = "granting", _("Being granted")
    ACTIVE = "active", _("Active")
    REVOKING = "revoking", _("Being revoked")
    REVOKED = "revoked", _("Revoked")
    EXPIRED = "expired", _("Expired")
    DECLINED = "declined", _("Declined")
    FAILED = "failed", _("Failed")


P = SpendPermissionStatus
# An agent asks (requested, with the grant action to sign) → the user signs the grant
# (granting) → its user operation is included (active) → the user revokes (revoking, the
# session key already destroyed) → the revocation is included (revoked). A grant never signed
# is declined; one that failed on chain, failed; an active one past its end, expired. Every
# end destroys the session key.
SPEND_PERMISSION_LIFECYCLE = register(
    Lifecycle(
        name="spendPermission",
        model_label="actions.SpendPermission",
        history_label="actions.SpendPermissionHistory",
        moves={
            P.REQUESTED: frozenset({P.GRANTING, P.DECLINED, P.FAILED}),
            P.GRANTING: frozenset({P.ACTIVE, P.FAILED}),
            P.ACTIVE: frozenset({P.REVOKING, P.EXPIRED}),
            P.REVOKING: frozenset({P.REVOKED, P.EXPIRED, P.FAILED}),
            P.REVOKED: frozenset(),
            P.EXPIRED: frozenset(),
            P.DECLINED: frozenset(),
            P.FAILED: frozenset(),
        },
        timestamps={P.ACTIVE: "granted_at"},
        history_fk="permission",
        timeline_url_name="actions-staff:spend-permission-timeline",
    )
)
SPEND_PERMISSION_LIVE = (P.REQUESTED, P.GRANTING, P.ACTIVE)


class SpendPermission(LifecycleModel):
    """What an agent may spend from the user's passkey account without a prompt, signed once
    by the user and enforced by the account's contract: a token, an allowance per period, the
    recipients (or any), a window. The server holds the grant's own session key, encrypted
    (actions/permissions/session_keys.py); it is emptied when the grant ends and never shown."""

    lifecycle = SPEND_PERMISSION_LIFECYCLE

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    status = models.CharField(
        max_length=16, choices=SpendPermissionStatus.choices, default=P.REQUESTED, db_index=True
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="spend_permissions"
    )
    account = models.ForeignKey(
        SmartAccount, on_delete=models.PROTECT, related_name="spend_permissions"
    )
    chain_id = models.PositiveBigIntegerField()
    token = models.ForeignKey(Token, on_delete=models.PROTECT, related_name="spend_permissions")
    # The agent (OAuth application) the permission is for: only its calls may spend under it.
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        on_delete=models.PROTECT,
        related_name="spend_permissions",
    )
    name = models.CharField(max_length=100)
    purpose = models.TextField(blank=True, default="")
    allowance_units = models.CharField(max_length=78, help_text="per period, token units")
    allowance = models.CharField(max_length=80, help_text="per period, as a decimal string")
    period = models.CharField(max_length=8, choices=SpendPeriod.choices)
    # [{"address": "0x…", "name": "merchant.eth" or ""}]: names resolved when asked.
    recipients = models.JSONField(default=list, blank=True)
    any_recipient = models.BooleanField(default=False)
    # The pair, token → to_token, a permission may also swap (same chain; null: transfers
    # only), and the routers its swaps may go through (checksummed addresses).
    to_token = models.ForeignKey(
        Token,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="spend_permissions_into",
    )
    routers = models.JSONField(default=list, blank=True)
    starts_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)
    permission_id = models.CharField(max_length=66, unique=True, help_text="bytes32 on chain")
    session_key_address = models.CharField(max_length=42)
    # Fernet token of the session key; "" once the grant ended (destroyed).
    session_key_encrypted = models.TextField(blank=True, default="", editable=False)
    grant_action = models.OneToOneField(
        Action, null=True, blank=True, on_delete=models.SET_NULL, related_name="granted_permission"
    )
    revoke_action = models.ForeignKey(
        Action, null=True, blank=True, on_delete=models.SET_NULL, related_name="revoked_permissions"
    )
    error = models.TextField(blank=True, default="")
    granted_at = models.DateTimeField(null=True, blank=True)
    key_destroyed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            # The console's search by name, whatever its case (exact on LOWER(name)).
            models.Index(Lower("name"), name="spend_permission_name_lower"),
            # And by its session key's address (any of the forms address_forms gives).
            models.Index(fields=["session_key_address"], name="spend_permission_session_key"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=SpendPermissionStatus.values),
                name="spend_permission_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(period__in=SpendPeriod.values), name="spend_permission_period_valid"
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("starts_at")),
                name="spend_permission_window",
            ),
            # A grant that ended holds no key.
            models.CheckConstraint(
                condition=Q(status__in=[P.REQUESTED, P.GRANTING, P.ACTIVE])
                | Q(session_key_encrypted=""),
                name="spend_permission_ended_no_key",
            ),
        ]

    def __str__(self) -> str:
        return f"spending permission {self.name} ({self.status})"

    @property
    def has_key(self) -> bool:
        return bool(self.session_key_encrypted)


class SpendPermissionHistory(StatusHistory):
    permission = models.ForeignKey(
        SpendPermission, on_delete=models.CASCADE, related_name="history"
    )

    class Meta(StatusHistory.Meta):
        verbose_name_plural = "spending permission history"
