"""The action: one thing an agent proposes and the user signs (a transfer, a swap, a card
change, a spending permission granted or revoked), its lifecycle and its status history."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from core.lifecycle import Lifecycle, register
from core.models import LifecycleModel, StatusHistory


class ActionType(models.TextChoices):
    TRANSFER = "transfer", "Transfer"
    SWAP = "swap", "Swap"
    CARD_FREEZE = "cardFreeze", "Card freeze"
    CARD_UNFREEZE = "cardUnfreeze", "Card unfreeze"
    CARD_LIMIT_SET = "cardLimitSet", "Card daily limit"
    SPEND_GRANT = "spendGrant", "Spending permission"
    SPEND_REVOKE = "spendRevoke", "Spending permission revoked"


class ActionStatus(models.TextChoices):
    PROPOSED = "proposed", _("Proposed")
    SIGNED = "signed", _("Signed")
    SUBMITTED = "submitted", _("Submitted")
    BROADCAST = "broadcast", _("Broadcast")
    EXECUTED = "executed", _("Executed")
    FAILED = "failed", _("Failed")
    EXPIRED = "expired", _("Expired")
    REJECTED = "rejected", _("Rejected")


S = ActionStatus
# The seed's lifecycle: proposed → signed → submitted → broadcast → executed, with failed
# (on-chain revert), expired (TTL before signing) and rejected (declined) as the other terminal
# states. Reconciliation may find the receipt of a `submitted` action directly. `failed` is also
# where a refusal that makes execution impossible ends (the bundler refused the signed op for
# good, its nonce went to another op) — the only terminal status that says "did not happen";
# `error` says which. Staff may mark a `signed` action failed (its submission never started).
ACTION_LIFECYCLE = register(
    Lifecycle(
        name="action",
        model_label="actions.Action",
        history_label="actions.ActionStatusHistory",
        moves={
            S.PROPOSED: frozenset({S.SIGNED, S.EXPIRED, S.REJECTED}),
            S.SIGNED: frozenset({S.SUBMITTED, S.FAILED}),
            S.SUBMITTED: frozenset({S.BROADCAST, S.EXECUTED, S.FAILED}),
            S.BROADCAST: frozenset({S.EXECUTED, S.FAILED}),
            S.EXECUTED: frozenset(),
            S.FAILED: frozenset(),
            S.EXPIRED: frozenset(),
            S.REJECTED: frozenset(),
        },
        timestamps={S.SIGNED: "signed_at", S.BROADCAST: "broadcast_at", S.EXECUTED: "executed_at"},
        history_fk="action",
        resource_uri_template="picnic://action/{id}",
        timeline_url_name="actions-staff:action-timeline",
        stuck_selector="actions.execution.selectors.actions_stuck",
    )
)
PENDING_ON_CHAIN = (S.SUBMITTED, S.BROADCAST)
# The status-history rows of a cross-chain swap's second leg (actions/bridges/services.py)
# keep the status (`executed` → `executed`) and say what the bridge did after this prefix.
LEG_DETAIL = "destination leg: "
# Signed by the user, not yet ended: what staff may resolve, and what "stuck" looks at.
IN_FLIGHT = (S.SIGNED, *PENDING_ON_CHAIN)


class Action(LifecycleModel):
    lifecycle = ACTION_LIFECYCLE

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    type = models.CharField(max_length=16, choices=ActionType.choices)
    # Indexed with the lists' order (`action_status_created`).
    status = models.CharField(
        max_length=16, choices=ActionStatus.choices, default=ActionStatus.PROPOSED
    )
    summary = models.TextField(help_text="What the user sees on the signing page.")
    chain_id = models.PositiveBigIntegerField()
    # Indexed by its lowercase form with the lists' order (`action_account_created`).
    smart_account = models.CharField(max_length=42)

    # Owner: the user and the OAuth client (agent) that created the action.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="picnic_actions"
    )
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        on_delete=models.PROTECT,
        related_name="picnic_actions",
    )

    params = models.JSONField(default=dict, blank=True, help_text="The tool call's parameters.")
    user_op = models.JSONField(
        null=True, blank=True, help_text="ERC-4337 user operation (bundler RPC field names)."
    )
    entry_point = models.CharField(max_length=42, blank=True)
    entry_point_version = models.CharField(max_length=4, blank=True)
    user_op_hash = models.CharField(max_length=66, null=True, blank=True, db_index=True)
    tx_hash = models.CharField(max_length=66, null=True, blank=True, db_index=True)
    block_number = models.PositiveBigIntegerField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)

    # Its own created_at (indexed: retention and the admin sort on it); updated_at is inherited.
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField()
    signed_at = models.DateTimeField(null=True, blank=True)
    broadcast_at = models.DateTimeField(null=True, blank=True)
    executed_at = models.DateTimeField(null=True, blank=True)

    # Reconciliation bookkeeping for support staff (not part of the status contract).
    last_reconciled_at = models.DateTimeField(null=True, blank=True)
    last_reconcile_error = models.TextField(blank=True, default="")
    # Deliveries of the signed user operation to the bundler (the first one included), and when
    # reconciliation may send the same op again (backoff, or a check that the bundler kept it).
    submit_attempts = models.PositiveIntegerField(default=0)
    next_submit_at = models.DateTimeField(null=True, blank=True)
    # A grant or revocation of a spending permission, or a transfer signed under one (by its
    # session key, with no passkey prompt).
    spend_permission = models.ForeignKey(
        "SpendPermission",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="actions",
    )

    class Meta:
        ordering = ("-created_at",)
        permissions = [
            ("resolve_action", "Can mark in-flight actions failed or re-send them"),
            ("reconcile_action", "Can reconcile actions now (ask the bundler for the receipt)"),
        ]
        indexes = [
            models.Index(fields=["status", "updated_at"], name="action_status_updated"),
            # Every lookup by status, and the admin's status filter read in the list's order
            # (newest first): a page of a rare status reads its page, not all of them sorted.
            models.Index(fields=["status", "-created_at", "-id"], name="action_status_created"),
            # The admin's "stuck" filter (in flight, signed long ago), newest first.
            models.Index(
                fields=["-created_at", "-id"],
                name="action_in_flight_created",
                condition=Q(status__in=IN_FLIGHT),
            ),
            # The console's needs-attention list (stuck in flight), oldest change first: its
            # page is read in this order (by status, each in-flight status is in order alone).
            models.Index(
                fields=["updated_at"],
                name="action_in_flight_updated",
                condition=Q(status__in=IN_FLIGHT),
            ),
            # The same filtered by owner (the console's owner filter).
            models.Index(
                fields=["user", "updated_at"],
                name="action_in_flight_user_updated",
                condition=Q(status__in=IN_FLIGHT),
            ),
            # The console's search by owner: a user's newest first, read only up to its limit
            # (on user_id alone every row of the user is fetched and sorted).
            models.Index(fields=["user", "-created_at"], name="action_user_created"),
            # The console's search by a transfer's recipient and its ENS name (selectors read
            # these exact expressions: params->>'to', params->>'ens').
            models.Index(KeyTextTransform("to", "params"), name="action_params_to"),
            models.Index(KeyTextTransform("ens", "params"), name="action_params_ens"),
            # A smart account's actions, newest first, in any spelling of its address (the
            # admin's and the console's searches read LOWER(smart_account)): a page reads its
            # rows from here however long the account's history (an IN over the spellings
            # sorted all of them, or walked the whole list's order).
            models.Index(
                Lower("smart_account"),
                F("created_at").desc(),
                F("id").desc(),
                name="action_account_created",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ActionStatus.values), name="action_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(type__in=ActionType.values), name="action_type_valid"
            ),
            # tx_hash and block_number arrive together with the receipt.
            models.CheckConstraint(
                condition=Q(tx_hash__isnull=True, block_number__isnull=True)
                | Q(tx_hash__isnull=False, block_number__isnull=False),
                name="action_receipt_fields_together",
            ),
            # A user operation is executed only with its receipt; card actions settle off-chain.
            models.CheckConstraint(
                condition=~Q(status=ActionStatus.EXECUTED)
                | Q(tx_hash__isnull=False)
                | Q(user_op_hash__isnull=True),
                name="action_executed_has_tx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_type_display()} {self.id} ({self.status})"

    @property
    def transitions(self) -> list:
        """The status history without staff audit rows that moved nothing (a re-send): the
        seed's `status_history` is the trail of transitions, and of a cross-chain swap's
        destination leg (rows that keep `executed`, detail "destination leg: …"). Uses the history read with the
        action (`selectors.action_status_for_client`: `StatusRow`s, the fields the answer
        shows) or a prefetched `history` (model instances)."""
        rows = self.__dict__.get("preloaded_history")
        if rows is None:
            rows = self.history.all()
        return [
            row
            for row in rows
            if row.from_status != row.status or (row.detail or "").startswith(LEG_DETAIL)
        ]


class ActionStatusHistory(StatusHistory):
    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="history")

    class Meta(StatusHistory.Meta):
        verbose_name_plural = "action status history"
