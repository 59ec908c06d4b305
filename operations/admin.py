from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Q
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from core.admin import (
    COUNT_CAP,
    EstimatedCountMixin,
    LifecycleAdmin,
    ReadOnlyAdminMixin,
    ReadOnlyInline,
    text_cell,
    user_ids_matching,
)
from core.lifecycle import IllegalTransition
from core.templatetags.picnic_dates import timestamp
from operations.decisions import operation_pause, operation_resume
from operations.models import (
    BillingComponent,
    DispatchStatus,
    LedgerEntry,
    Operation,
    Quote,
    Wallet,
)
from operations.selectors import operations_stuck


class ComponentInline(ReadOnlyInline):
    model = BillingComponent
    fields = (
        "kind",
        "source_id",
        "model",
        "credential_id",
        "usage_credits",
        "wallet_debited_credits",
        "evidence_at",
    )
    readonly_fields = fields


class WorkFilter(admin.SimpleListFilter):
    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request, model_admin):
        return [
            ("needs_review", "needs review"),
            ("reconciling", "reconciling"),
            ("dispatch_unknown", "dispatch unknown"),
            (
                "stuck_running",
                f"running for more than {settings.OPERATIONS_STUCK_RUNNING_MINUTES} min",
            ),
        ]

    def queryset(self, request, queryset):
        value = self.value()
        if value in ("needs_review", "reconciling"):
            return queryset.filter(state=value)
        if value == "dispatch_unknown":
            return queryset.filter(dispatch_status=DispatchStatus.UNKNOWN)
        if value == "stuck_running":
            return queryset & operations_stuck()
        return queryset


@admin.register(Operation)
class OperationAdmin(LifecycleAdmin):
    lifecycle = Operation.lifecycle
    # What fits 1280 px: the category and stage are on the change page; the last error,
    # shortened, says why an operation needs attention.
    list_display = (
        "short_id",
        "tool",
        "state",
        "dispatch",
        "billing",
        "owner",
        "created_at",
        "error_short",
    )
    list_filter = (WorkFilter, "state", "dispatch_status", "billing_status", "channel")
    # Searches are exact lookups on indexes, by the shape of the term (search_exact):
    # `=id` cast the uuid to text and missed the primary key; tool and category substrings
    # scanned the table.
    search_fields = ("=id", "backend_response_id", "owner__username")
    search_help_text = "Exact: an operation id, a backend response id, a username or an e-mail."
    list_select_related = ("owner",)
    inlines = [ComponentInline]
    actions = ["pause", "resume"]
    # The review (JSON) is shown with its request and decision times to the second, in the
    # staff member's zone, instead of the raw isoformat (review_shown).
    exclude = ("review",)
    readonly_fields = [f.name for f in Operation._meta.concrete_fields if f.name != "review"] + [
        "review_shown",
        "links",
    ]

    def search_exact(self, queryset, kind, value, term):
        if kind == "uuid":
            return queryset.filter(pk=value)
        owners = user_ids_matching(term)
        # The response ids first (an exact lookup, by pk after): OR-ed with the owner in one
        # WHERE, the planner read and sorted every operation of the owner for a page of 50.
        answered = list(
            queryset.filter(backend_response_id=term).values_list("pk", flat=True)[:COUNT_CAP]
        )
        if not answered:
            return queryset.filter(owner__in=owners)
        return queryset.filter(Q(pk__in=answered) | Q(owner__in=owners))

    @admin.display(description="dispatch", ordering="dispatch_status")
    def dispatch(self, obj: Operation) -> str:
        return obj.get_dispatch_status_display()

    @admin.display(description="billing", ordering="billing_status")
    def billing(self, obj: Operation) -> str:
        return obj.get_billing_status_display()

    @admin.display(description="last error")
    def error_short(self, obj: Operation) -> str:
        return text_cell(obj.last_error, limit=60)

    @admin.display(description="review")
    def review_shown(self, obj: Operation) -> str:
        if not obj.review:
            return "—"
        return format_html_join(
            " · ",
            "{}: {}",
            (
                (key, timestamp(value) if key.endswith("_at") else value)
                for key, value in obj.review.items()
            ),
        )

    @admin.display(description="links")
    def links(self, obj: Operation) -> str:
        return format_html(
            '{} · <a href="{}">review queue</a>',
            self.timeline_link(obj),
            reverse("operations-staff:review-queue"),
        )

    def _each(self, request, queryset, service, verb: str) -> None:
        done, refused = 0, []
        for pk in queryset.values_list("pk", flat=True):
            try:
                service(operation_id=pk, staff_user=request.user)
                done += 1
            except IllegalTransition as exc:
                refused.append(f"{pk} is {exc.current}")
        self.message_user(request, f"{verb} {done}.")
        if refused:
            self.message_user(
                request, f"Not {verb.lower()}: " + "; ".join(refused), messages.WARNING
            )

    def has_pause_permission(self, request) -> bool:
        return request.user.has_perm("operations.pause_operation")

    @admin.action(permissions=["pause"], description="Pause selected operations")
    def pause(self, request, queryset):
        self._each(request, queryset, operation_pause, "Paused")

    @admin.action(permissions=["pause"], description="Resume selected paused operations")
    def resume(self, request, queryset):
        self._each(request, queryset, operation_resume, "Resumed")


class LedgerInline(ReadOnlyInline):
    model = LedgerEntry
    fields = ("created_at", "kind", "amount", "available_after", "held_after", "operation", "note")
    readonly_fields = fields
    ordering = ("-created_at", "-id")


@admin.register(Wallet)
class WalletAdmin(admin.ModelAdmin):
    list_display = ("owner", "available_credits", "held_credits", "updated_at")
    search_fields = ("owner__username",)
    readonly_fields = ("owner", "available_credits", "held_credits", "updated_at")
    inlines = [LedgerInline]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # The balance is the sum of its append-only ledger (which PROTECTs it).
        return False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(EstimatedCountMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "created_at",
        "wallet",
        "kind",
        "amount",
        "available_after",
        "held_after",
        "operation",
    )
    list_filter = ("kind",)
    search_fields = ("wallet__owner__username", "=operation__id")


@admin.register(Quote)
class QuoteAdmin(admin.ModelAdmin):
    list_display = ("id", "tool", "owner", "quoted_credits", "expires_at")
    raw_id_fields = ("owner",)  # not a <select> of every user
    search_fields = ("=id", "tool")
