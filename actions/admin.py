from __future__ import annotations

import uuid
from collections import Counter

from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html
from django.utils.timesince import timesince

from actions.models import (
    Action,
    ActionStatusHistory,
    Card,
    CardPurchase,
    HistoryEntry,
    Passkey,
    RampAccount,
    SmartAccount,
    Token,
    TokenTransfer,
)
from actions.selectors import actions_stuck
from actions.services import action_reconcile, ramp_kyc_refresh
from picnic.admin import StatusHistoryInline
from picnic.lifecycle import Actor


class StuckFilter(admin.SimpleListFilter):
    title = "stuck"
    parameter_name = "stuck"

    def lookups(self, request, model_admin):
        minutes = settings.ACTIONS_STUCK_AFTER_MINUTES
        return [("yes", f"submitted/broadcast for more than {minutes} min")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(pk__in=actions_stuck().values("pk"))
        return queryset


class ActionStatusHistoryInline(StatusHistoryInline):
    model = ActionStatusHistory


@admin.register(Action)
class ActionAdmin(admin.ModelAdmin):
    list_display = ("id", "type", "status", "user", "age", "smart_account", "error_short")
    list_filter = ("status", "type", StuckFilter)
    search_fields = ("user_op_hash", "tx_hash", "smart_account", "user__username")
    list_select_related = ("user",)
    inlines = [ActionStatusHistoryInline]
    actions = ["reconcile_now"]
    readonly_fields = [f.name for f in Action._meta.concrete_fields] + ["timeline"]
    fieldsets = (
        (None, {"fields": ("id", "type", "status", "summary", "timeline", "error")}),
        ("Owner", {"fields": ("user", "application")}),
        (
            "Chain",
            {
                "fields": (
                    "chain_id",
                    "smart_account",
                    "entry_point",
                    "entry_point_version",
                    "user_op_hash",
                    "tx_hash",
                    "block_number",
                    "user_op",
                    "params",
                )
            },
        ),
        (
            "Timestamps",
            {
                "fields": (
                    "created_at",
                    "updated_at",
                    "expires_at",
                    "signed_at",
                    "broadcast_at",
                    "executed_at",
                    "last_reconciled_at",
                    "last_reconcile_error",
                )
            },
        ),
    )

    def has_add_permission(self, request):
        return False  # actions are created by the action tools, never by hand

    def has_change_permission(self, request, obj=None):
        return False  # status changes only through transitions (admin actions)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            pass
        if term.startswith("0x"):
            term = term.lower()
            return (
                queryset.filter(user_op_hash=term)
                | queryset.filter(tx_hash=term)
                | queryset.filter(smart_account__iexact=term)
            ), False
        return super().get_search_results(request, queryset, search_term)

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: Action) -> str:
        return timesince(obj.created_at)

    @admin.display(description="error")
    def error_short(self, obj: Action) -> str:
        return (obj.error or "")[:60]

    @admin.display(description="live timeline")
    def timeline(self, obj: Action) -> str:
        url = reverse("actions-staff:action-timeline", args=[obj.pk])
        return format_html('<a href="{}">open the live timeline</a>', url)

    @admin.action(description="Reconcile now (ask the bundler for the receipt)")
    def reconcile_now(self, request, queryset):
        outcomes: Counter = Counter()
        note = f"reconcile now by staff {request.user.get_username()}"
        for pk in queryset.values_list("pk", flat=True):
            outcomes[
                action_reconcile(action_id=pk, actor=Actor.staff(request.user), note=note)
            ] += 1
        summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        level = messages.WARNING if outcomes.get("unavailable") else messages.SUCCESS
        self.message_user(request, f"Reconciled {sum(outcomes.values())}: {summary}", level)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Support staff look; the chain and the passkey registration are where these change."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(SmartAccount)
class SmartAccountAdmin(ReadOnlyAdmin):
    list_display = ("address", "kind", "chain_id", "user", "owner", "created_at")
    list_filter = ("kind", "chain_id")
    search_fields = ("address", "user__username", "owner")


@admin.register(Card)
class CardAdmin(ReadOnlyAdmin):
    list_display = ("card_id", "last4", "user", "safe_address", "is_virtual", "token")
    list_filter = ("is_virtual", "chain_id")
    search_fields = ("card_id", "safe_address", "user__username")
    readonly_fields = ("delay_address", "roles_address")


@admin.register(Passkey)
class PasskeyAdmin(ReadOnlyAdmin):
    list_display = ("credential_id", "user", "sign_count", "created_at", "last_used_at")
    search_fields = ("credential_id", "user__username")
    exclude = ("public_key",)


@admin.register(Token)
class TokenAdmin(admin.ModelAdmin):
    list_display = ("symbol", "name", "chain_id", "address", "decimals", "price_id")
    list_filter = ("chain_id",)
    search_fields = ("symbol", "address")


@admin.register(RampAccount)
class RampAccountAdmin(admin.ModelAdmin):
    """Which provider account is the user's; the KYC fields are the provider's word, so they
    are read-only here and refreshed from the provider (on read, or with the action)."""

    list_display = ("user", "currency", "provider", "external_id", "kyc_status", "kyc_checked_at")
    list_filter = ("currency", "provider", "kyc_status")
    search_fields = ("user__username", "user__email", "external_id")
    readonly_fields = ("kyc_status", "provider_status", "kyc_checked_at", "kyc_error")
    actions = ["refresh_kyc"]

    @admin.action(description="Refresh KYC status from the provider")
    def refresh_kyc(self, request, queryset) -> None:
        ramps = [ramp_kyc_refresh(ramp_id=r.pk) for r in queryset]
        failed = [r for r in ramps if r.kyc_error]
        for ramp in failed:
            self.message_user(request, f"{ramp}: {ramp.kyc_error}", messages.WARNING)
        self.message_user(request, f"Refreshed {len(ramps) - len(failed)} of {len(ramps)}")


@admin.register(HistoryEntry)
class HistoryEntryAdmin(ReadOnlyAdmin):
    """get_transactions as the user sees it, for support: built from the chain, our actions
    and Gnosis Pay, so nothing here is edited by hand."""

    list_display = ("occurred_at", "user", "kind", "tx_hash", "action", "card_purchase")
    list_filter = ("kind", "chain_id")
    search_fields = ("user__username", "tx_hash", "action__id")
    list_select_related = ("user", "action", "card_purchase")
    date_hierarchy = "occurred_at"


@admin.register(TokenTransfer)
class TokenTransferAdmin(ReadOnlyAdmin):
    list_display = ("block_time", "token", "from_address", "to_address", "units", "tx_hash")
    list_filter = ("token",)
    search_fields = ("tx_hash", "from_address", "to_address")
    list_select_related = ("token",)


@admin.register(CardPurchase)
class CardPurchaseAdmin(ReadOnlyAdmin):
    list_display = ("occurred_at", "card", "kind", "status", "mcc", "billing_amount", "is_pending")
    list_filter = ("kind", "status", "is_pending")
    search_fields = ("thread_id", "card__card_id", "card__user__username")
    list_select_related = ("card", "card__user")
