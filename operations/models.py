from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.lifecycle import Lifecycle, register
from core.models import AppendOnly, LifecycleModel, StatusHistory

CREDITS = {"max_digits": 20, "decimal_places": 6, "default": Decimal("0")}


class Channel(models.TextChoices):
    API = "api", "API"
    MCP = "mcp", "MCP"


class State(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    NEEDS_REVIEW = "needs_review"
    PAUSED = "paused"
    RECONCILING = "reconciling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The lifecycle's ended states (a test holds them equal), for the partial indexes below, which
# say "none of the finished states": PostgreSQL proves that each branch of a list's OR implies
# that, not that it implies an IN of the unfinished ones (it wants every branch to imply one
# value of such a list).
FINISHED_STATES = [State.SUCCEEDED, State.FAILED, State.CANCELLED]
OPEN_OPERATIONS = ~Q(state__in=FINISHED_STATES)


class Status(models.TextChoices):
    ACCEPTED = "accepted"
    RUNNING = "running"
    NEEDS_REVIEW = "needs_review"
    PAUSED = "paused"
    RECONCILING = "reconciling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Stage(models.TextChoices):
    ADMISSION = "admission"
    DISPATCH = "dispatch"
    REVIEW = "review"
    GENERATION = "generation"
    RECONCILIATION = "reconciliation"
    COMPLETE = "complete"


class DispatchStatus(models.TextChoices):
    PENDING = "pending"
    UNKNOWN = "unknown"
    ACKNOWLEDGED = "acknowledged"


class BillingStatus(models.TextChoices):
    NONE = "none"
    PENDING = "pending"
    SETTLED = "settled"
    RELEASED = "released"
    RECONCILING = "reconciling"


# The one place that says which `status` and `stage`s go with each `state`. The database
# refuses any other combination (constraint below); transitions derive status from it.
STATE_TABLE: dict[str, tuple[str, tuple[str, ...]]] = {
    State.QUEUED: (Status.ACCEPTED, (Stage.ADMISSION, Stage.DISPATCH)),
    State.RUNNING: (Status.RUNNING, (Stage.GENERATION,)),
    State.WAITING: (Status.RUNNING, (Stage.GENERATION,)),
    State.NEEDS_REVIEW: (Status.NEEDS_REVIEW, (Stage.REVIEW,)),
    State.PAUSED: (Status.PAUSED, (Stage.DISPATCH, Stage.REVIEW, Stage.GENERATION)),
    State.RECONCILING: (Status.RECONCILING, (Stage.RECONCILIATION,)),
    State.SUCCEEDED: (Status.SUCCEEDED, (Stage.COMPLETE,)),
    State.FAILED: (Status.FAILED, (Stage.COMPLETE,)),
    State.CANCELLED: (Status.CANCELLED, (Stage.COMPLETE,)),
}


def _details_expire(values: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    # Every finished operation's details are purged in time, whichever path ended it.
    ttl = timedelta(hours=settings.OPERATIONS_DETAIL_TTL_HOURS)
    return {"detail_expires_at": values["completed_at"] + ttl}


_S = State
OPERATION_LIFECYCLE = register(
    Lifecycle(
        name="operation",
        model_label="operations.Operation",
        history_label="operations.OperationStatusHistory",
        status_field="state",
        moves={
            _S.QUEUED: frozenset(
                {
                    _S.RUNNING,
                    _S.WAITING,
                    _S.RECONCILING,
                    _S.NEEDS_REVIEW,
                    _S.FAILED,
                    _S.CANCELLED,
                    _S.PAUSED,
                    _S.SUCCEEDED,
                }
            ),
            _S.NEEDS_REVIEW: frozenset({_S.QUEUED, _S.CANCELLED, _S.PAUSED}),
            _S.RUNNING: frozenset(
                {_S.WAITING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.PAUSED, _S.RECONCILING}
            ),
            _S.WAITING: frozenset(
                {_S.RUNNING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.PAUSED, _S.RECONCILING}
            ),
            _S.PAUSED: frozenset({_S.QUEUED, _S.NEEDS_REVIEW, _S.RUNNING, _S.CANCELLED}),
            _S.RECONCILING: frozenset(
                {_S.QUEUED, _S.RUNNING, _S.WAITING, _S.SUCCEEDED, _S.FAILED, _S.CANCELLED}
            ),
            _S.SUCCEEDED: frozenset(),
            _S.FAILED: frozenset(),
            _S.CANCELLED: frozenset(),
        },
        timestamps={
            _S.SUCCEEDED: "completed_at",
            _S.FAILED: "completed_at",
            _S.CANCELLED: "completed_at",
        },
        on_terminal=(_details_expire,),
        history_fk="operation",
        # The MCP resource an agent subscribes to (mcp_adapter.server); every transition and
        # visible change is published under it.
        resource_uri_template="tong://operation/{id}",
        timeline_url_name="operations-staff:operation-timeline",
        stuck_selector="operations.selectors.operations_stuck",
    )
)


def _state_table_condition() -> Q:
    condition = Q()
    for state, (status, stages) in STATE_TABLE.items():
        condition |= Q(state=state, status=status, stage__in=stages)
    return condition


class Wallet(models.Model):
    """Credits of one owner. Changed only together with a ledger row, under a row lock."""

    owner = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="credit_wallet"
    )
    available_credits = models.DecimalField(**CREDITS)
    held_credits = models.DecimalField(**CREDITS)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(available_credits__gte=0), name="wallet_available_nonneg"
            ),
            models.CheckConstraint(condition=Q(held_credits__gte=0), name="wallet_held_nonneg"),
        ]
        # Only wallets with a hold (few): the credits-held gauge sums them at every scrape.
        indexes = [
            models.Index(
                fields=["held_credits"], name="wallet_holding", condition=Q(held_credits__gt=0)
            )
        ]

    def __str__(self) -> str:
        return (
            f"wallet of {self.owner}: {self.available_credits} available, {self.held_credits} held"
        )


class LedgerKind(models.TextChoices):
    GRANT = "grant", "Grant (credits added)"
    HOLD = "hold", "Hold (available → held)"
    RELEASE = "release", "Release (held → available)"
    DEBIT = "debit", "Debit (held or available → spent)"
    REFUND = "refund", "Refund (spent → available)"
    # Usage past the hold: never charged (a charge never exceeds its hold), only recorded.
    WRITE_OFF = "write_off", "Write-off (usage past the hold, not charged)"


class LedgerEntry(AppendOnly):
    """Append-only: every movement of credits, with the balances after it."""

    append_only_rows = "ledger entries"

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="ledger")
    kind = models.CharField(max_length=16, choices=LedgerKind.choices)
    amount = models.DecimalField(max_digits=20, decimal_places=6)
    available_delta = models.DecimalField(max_digits=20, decimal_places=6)
    held_delta = models.DecimalField(max_digits=20, decimal_places=6)
    available_after = models.DecimalField(max_digits=20, decimal_places=6)
    held_after = models.DecimalField(max_digits=20, decimal_places=6)
    operation = models.ForeignKey(
        "Operation", null=True, blank=True, on_delete=models.PROTECT, related_name="ledger"
    )
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("created_at", "id")
        verbose_name_plural = "ledger entries"
        constraints = [
            models.CheckConstraint(condition=Q(amount__gte=0), name="ledger_amount_nonneg")
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount}"


class Quote(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="quotes"
    )
    # The agent that asked for it: only that agent may start it, as operations are per agent.
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="quotes",
    )
    tool = models.CharField(max_length=100)
    operation_name = models.CharField(max_length=100, null=True, blank=True)
    model = models.CharField(max_length=100, null=True, blank=True)
    configuration = models.JSONField(default=dict, blank=True)
    submit_field = models.CharField(max_length=100)
    submit_value = models.TextField()
    quoted_credits = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    # The price as it was quoted, line by line (credits as six-decimal strings): the quote
    # holds until it expires even if the prices change in between.
    breakdown = models.JSONField(default=dict, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"quote {self.id} for {self.tool}: {self.quoted_credits}"


class Operation(LifecycleModel):
    lifecycle = OPERATION_LIFECYCLE

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="operations"
    )
    # The agent that started it: only that agent reads or cancels it over the API and MCP
    # (staff see them all). Null on rows made without an agent.
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="operations",
    )
    tool = models.CharField(max_length=100)
    category = models.CharField(max_length=100)
    channel = models.CharField(max_length=8, choices=Channel.choices, default=Channel.API)
    model = models.CharField(max_length=100, null=True, blank=True)
    input = models.JSONField(default=dict, blank=True)
    quote = models.OneToOneField(
        Quote, null=True, blank=True, on_delete=models.PROTECT, related_name="used_by"
    )
    # The caller's key for a start: the same key (for the same owner and agent) returns the
    # same operation instead of a second one.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    # The answer's token budget the hold was priced for, sent to the backend as its limit
    # (null on rows from before it was stored: the quote's or the default then).
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)

    state = models.CharField(
        max_length=16, choices=State.choices, default=State.QUEUED, db_index=True
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACCEPTED)
    stage = models.CharField(max_length=16, choices=Stage.choices, default=Stage.ADMISSION)
    paused_from = models.CharField(max_length=16, choices=State.choices, blank=True)
    dispatch_status = models.CharField(
        max_length=16, choices=DispatchStatus.choices, default=DispatchStatus.PENDING
    )
    backend_response_id = models.CharField(max_length=200, null=True, blank=True)

    detail_expires_at = models.DateTimeField(null=True, blank=True)
    detail_expired = models.BooleanField(default=False)
    dispatch_started_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    next_check_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True, default="")

    review = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=100, null=True, blank=True)

    billing_status = models.CharField(
        max_length=16, choices=BillingStatus.choices, default=BillingStatus.NONE
    )
    held_credits = models.DecimalField(**CREDITS, help_text="The hold taken at admission.")
    pending_credits = models.DecimalField(**CREDITS)
    usage_credits = models.DecimalField(**CREDITS)
    wallet_debited_credits = models.DecimalField(**CREDITS)
    released_credits = models.DecimalField(**CREDITS)
    refunded_credits = models.DecimalField(**CREDITS)
    # Usage past the hold: written off (a `write_off` ledger row), never taken from the wallet.
    unfunded_credits = models.DecimalField(**CREDITS)
    tokens = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        permissions = [
            ("review_operation", "Can approve or reject operations in review"),
            ("pause_operation", "Can pause, resume or cancel operations"),
        ]
        indexes = [
            models.Index(fields=["state", "next_check_at"], name="operation_due"),
            # Back-office (admin): the list's order, the rare-value filters in that order
            # (dispatch unknown, billing reconciling), and the exact backend response search.
            models.Index(fields=["created_at"], name="operation_created"),
            # The review queue, oldest first a page at a time (keyset on created_at, id).
            models.Index(
                fields=["created_at", "id"],
                name="operation_review_queue",
                condition=Q(state="needs_review"),
            ),
            models.Index(fields=["dispatch_status", "created_at"], name="operation_dispatch"),
            models.Index(fields=["billing_status", "created_at"], name="operation_billing"),
            models.Index(fields=["backend_response_id"], name="operation_backend_response"),
            # The console's search by owner: a user's newest first, read only up to its limit.
            models.Index(fields=["owner", "-created_at"], name="operation_owner_created"),
            # The console's needs-attention list, oldest change first: every branch of its OR
            # (`operations_needing_attention`) is an unfinished state, so it reads its page
            # from here, not every open operation sorted.
            models.Index(
                fields=["updated_at"],
                name="operation_open_updated",
                condition=OPEN_OPERATIONS,
            ),
            # The same list filtered by owner (the console's owner filter).
            models.Index(
                fields=["owner", "updated_at"],
                name="operation_open_owner_updated",
                condition=OPEN_OPERATIONS,
            ),
            # The admin's filters of unfinished work (stuck running, needs review, …), newest
            # first: a page reads its page from the open operations in the list's order.
            models.Index(
                fields=["-created_at", "-id"],
                name="operation_open_created",
                condition=OPEN_OPERATIONS,
            ),
        ]
        constraints = [
            # Keys are per agent (OAuth application), as the operations themselves are; two
            # constraints, as NULLs are distinct in a unique index (no agent: per owner).
            models.UniqueConstraint(
                fields=["owner", "application", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, application__isnull=False),
                name="operation_idempotency_key_agent",
            ),
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, application__isnull=True),
                name="operation_idempotency_key_no_agent",
            ),
            models.CheckConstraint(
                condition=_state_table_condition(), name="operation_state_status_stage"
            ),
            models.CheckConstraint(
                condition=Q(dispatch_status__in=DispatchStatus.values),
                name="operation_dispatch_valid",
            ),
            models.CheckConstraint(
                condition=Q(billing_status__in=BillingStatus.values), name="operation_billing_valid"
            ),
            # The hold is always fully accounted for.
            models.CheckConstraint(
                condition=Q(
                    pending_credits__gte=0,
                    released_credits__gte=0,
                    unfunded_credits__gte=0,
                    refunded_credits__lte=models.F("wallet_debited_credits"),
                ),
                name="operation_credits_sane",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} {self.id} ({self.state})"


class BillingComponent(models.Model):
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="components")
    source_id = models.CharField(max_length=200)
    tool = models.CharField(max_length=100)
    model = models.CharField(max_length=100, null=True, blank=True)
    channel = models.CharField(max_length=8, choices=Channel.choices)
    credential_id = models.CharField(max_length=200)
    kind = models.CharField(
        max_length=16,
        choices=[
            ("text_pool", "text_pool"),
            ("reasoning", "reasoning"),
            ("generation", "generation"),
        ],
    )
    usage_credits = models.DecimalField(**CREDITS)
    wallet_debited_credits = models.DecimalField(**CREDITS)
    evidence_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("id",)
        constraints = [
            models.UniqueConstraint(
                fields=["operation", "source_id", "kind"], name="component_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.usage_credits} ({self.source_id})"


class OperationStatusHistory(StatusHistory):
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="history")

    class Meta(StatusHistory.Meta):
        verbose_name_plural = "operation status history"
