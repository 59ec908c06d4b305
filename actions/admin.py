from __future__ import annotations

import uuid
from collections import Counter

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.timesince import timesince

from actions.accounts.models import AccountChange, Passkey, SmartAccount, Token
from actions.card.models import Card
from actions.execution.models import IN_FLIGHT, Action
from actions.execution.public import (
    ActionResolutionError,
    action_mark_failed,
    action_reconcile,
    action_resend,
    actions_of_account,
    actions_stuck,
)
from actions.history.models import CardPurchase, HistoryEntry, TokenTransfer
from actions.permissions.models import SpendPermission
from actions.ramps.models import RampAccount
from actions.ramps.public import ramp_kyc_refresh
from actions.views import resend_outcome_message
from core.admin import (
    EstimatedCountMixin,
    LifecycleAdmin,
    ReadOnlyAdminMixin,
    address_cell,
    text_cell,
    user_ids_matching,
)
from core.chains import all_chains, chain_name
from core.lifecycle import Actor
from core.templatetags.chains import explorer_url


class ChainFilter(admin.SimpleListFilter):
    """The chain filter by name (core.chains), not by bare id."""

    title = "chain"
    parameter_name = "chain_id"

    def lookups(self, request, model_admin):
        return [(str(chain.id), chain.name) for chain in all_chains()]

    def queryset(self, request, queryset):
        value = self.value()
        if value and value.isdigit():
            return queryset.filter(chain_id=int(value))
        return queryset


def chain_cell(chain_id) -> str:
    """A chain in a list or a change page: its name, the id on hover."""
    if chain_id is None:
        return ""
    return format_html(
        '<span class="picnic-chain" title="chain id {} (eip155:{})">{}</span>',
        chain_id,
        chain_id,
        chain_name(chain_id),
    )


def explorer_cell(chain_id, kind: str, value, cell: str) -> str:
    """`cell` (an address_cell, a block number) as a link to the chain's explorer, where the
    chain table has one; unchanged otherwise."""
    url = explorer_url(chain_id, kind, value)
    if not cell or url is None:
        return cell
    return format_html('<a class="explorer" href="{}" rel="noopener noreferrer">{}</a>', url, cell)


class ChainColumn:
    """The `chain` column of a model with a chain_id."""

    @admin.display(description="chain", ordering="chain_id")
    def chain(self, obj) -> str:
        return chain_cell(obj.chain_id)


class StuckFilter(admin.SimpleListFilter):
    title = "stuck"
    parameter_name = "stuck"

    def lookups(self, request, model_admin):
        minutes = settings.ACTIONS_STUCK_AFTER_MINUTES
        return [("yes", f"signed more than {minutes} min ago, not ended")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            # The selector's predicate on this queryset (the status index finds the few in
            # flight), not `pk IN (subquery)` walked backwards over created_at.
            return queryset & actions_stuck()
        return queryset


# Staff resolution of in-flight actions: the URL slug, the service, and what the page says.
MAX_RESOLVE = 100
RESOLUTIONS = {
    "mark-failed": {
        "verb": "Mark failed",
        "service": action_mark_failed,
        "explain": (
            'Each action ends failed with the error "marked failed by staff: <your note>". '
            "Its signed user operation stays valid until its nonce is used: say in the note "
            "why it will not be, or why that is fine."
        ),
    },
    "resend": {
        "verb": "Re-send",
        "service": action_resend,
        "explain": (
            "Each action is delivered again now: the same signed user operation goes to the "
            "bundler (after checking it is neither included nor held), a card request with the "
            "live session, or the submission a lost task never started. Nothing is signed anew."
        ),
    },
}


class ResolveActionsForm(forms.Form):
    ids = forms.ModelMultipleChoiceField(
        queryset=Action.objects.all(), widget=forms.MultipleHiddenInput
    )
    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        max_length=1000,
        help_text="Required: why, and what you checked. Kept in the history with your user.",
    )


@admin.register(Action)
class ActionAdmin(ChainColumn, LifecycleAdmin):
    lifecycle = Action.lifecycle
    list_display = (
        "short_id",
        "type",
        "status",
        "chain",
        "user",
        "age",
        "account",
        "error_short",
    )
    list_filter = ("status", "type", ChainFilter, StuckFilter)
    # Searches are exact lookups on indexes, by the shape of the term (search_exact).
    search_fields = ("user_op_hash", "tx_hash", "smart_account", "user__username")
    search_help_text = (
        "Exact: an action id, a userOpHash or tx hash, a smart account address, "
        "a username or an e-mail."
    )
    list_select_related = ("user",)
    actions = ["reconcile_now", "mark_failed", "resend"]
    readonly_fields = [f.name for f in Action._meta.concrete_fields] + [
        "timeline",
        "chain",
        "on_explorer",
    ]
    fieldsets = (
        (None, {"fields": ("id", "type", "status", "summary", "timeline", "error")}),
        ("Owner", {"fields": ("user", "application")}),
        (
            "Chain",
            {
                "fields": (
                    "chain",
                    "on_explorer",
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
                )
            },
        ),
        (
            "Delivery and reconciliation",
            {
                "fields": (
                    "submit_attempts",
                    "next_submit_at",
                    "last_reconciled_at",
                    "last_reconcile_error",
                )
            },
        ),
    )

    def search_exact(self, queryset, kind, value, term):
        if kind == "uuid":
            return queryset.filter(pk=value)
        if kind == "hash":  # hashes are stored as the bundler/node return them: lowercase
            return queryset.filter(Q(user_op_hash=value) | Q(tx_hash=value))
        if kind == "address":
            return actions_of_account(queryset, value)
        return queryset.filter(user__in=user_ids_matching(value))

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: Action) -> str:
        return timesince(obj.created_at)

    @admin.display(description="smart account")
    def account(self, obj: Action) -> str:
        return explorer_cell(
            obj.chain_id, "address", obj.smart_account, address_cell(obj.smart_account)
        )

    @admin.display(description="on the explorer")
    def on_explorer(self, obj: Action) -> str:
        """The account, the transaction and the block on the chain's explorer, if it has one."""
        links = [
            (kind, label, value)
            for kind, label, value in (
                ("address", "smart account", obj.smart_account),
                ("tx", "transaction", obj.tx_hash),
                ("block", "block", obj.block_number),
            )
            if value not in (None, "") and explorer_url(obj.chain_id, kind, value)
        ]
        if not links:
            return f"none: {chain_name(obj.chain_id)} has no explorer in the chain table"
        return format_html_join(
            " · ",
            '<a class="explorer" href="{}" rel="noopener noreferrer">{}</a>',
            ((explorer_url(obj.chain_id, kind, value), label) for kind, label, value in links),
        )

    @admin.display(description="error")
    def error_short(self, obj: Action) -> str:
        return text_cell(obj.error)

    @admin.display(description="live timeline")
    def timeline(self, obj: Action) -> str:
        return self.timeline_link(obj, "open the live timeline")

    def has_reconcile_permission(self, request) -> bool:
        return request.user.has_perm("actions.reconcile_action")

    @admin.action(
        permissions=["reconcile"], description="Reconcile now (ask the bundler for the receipt)"
    )
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

    # --- Staff resolution: "Mark failed…" and "Re-send…", each with a required note ---------

    def has_resolve_permission(self, request) -> bool:
        return request.user.has_perm("actions.resolve_action")

    @admin.action(
        permissions=["resolve"],
        description="Mark failed… (in-flight actions, with a required note)",
    )
    def mark_failed(self, request, queryset):
        return self._to_resolve_page(request, "mark-failed", queryset)

    @admin.action(
        permissions=["resolve"],
        description="Re-send… (in-flight actions, with a required note)",
    )
    def resend(self, request, queryset):
        return self._to_resolve_page(request, "resend", queryset)

    def _to_resolve_page(self, request, kind: str, queryset):
        ids = [str(pk) for pk in queryset.values_list("pk", flat=True)[: MAX_RESOLVE + 1]]
        if len(ids) > MAX_RESOLVE:  # the ids travel in the URL: one page, a bounded batch
            self.message_user(
                request,
                f"Select at most {MAX_RESOLVE} actions to resolve at once (filter first).",
                messages.WARNING,
            )
            return None
        url = reverse("admin:actions_action_resolve", args=[kind])
        return redirect(f"{url}?{urlencode({'ids': ids}, doseq=True)}")

    def resolve_url(self, kind: str, action: Action) -> str:
        url = reverse("admin:actions_action_resolve", args=[kind])
        return f"{url}?{urlencode({'ids': str(action.pk)})}"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        action = self.get_object(request, object_id)
        if (
            action is not None
            and action.status in IN_FLIGHT
            and self.has_resolve_permission(request)
        ):
            extra_context["resolve_links"] = [
                (self.resolve_url(kind, action), spec["verb"] + "…")
                for kind, spec in RESOLUTIONS.items()
            ]
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        return [
            path(
                "resolve/<slug:kind>/",
                self.admin_site.admin_view(self.resolve_view),
                name="actions_action_resolve",
            )
        ] + super().get_urls()

    def resolve_view(self, request, kind: str):
        """The intermediate page of "Mark failed…" and "Re-send…": the selected actions, a
        required note, then the service for each, reporting each outcome."""
        # The page lists the actions: resolving them needs seeing them.
        if not (
            self.has_resolve_permission(request) and self.has_view_or_change_permission(request)
        ):
            raise PermissionDenied
        spec = RESOLUTIONS.get(kind)
        if spec is None:
            raise Http404("No such resolution")
        if request.method == "POST":
            form = ResolveActionsForm(request.POST)
        else:
            form = ResolveActionsForm(initial={"ids": _valid_ids(request.GET.getlist("ids"))})
        if request.method == "POST" and form.is_valid():
            chosen = list(form.cleaned_data["ids"])
            for action in chosen:
                self._resolve_one(request, kind, spec, action, form.cleaned_data["note"])
            if len(chosen) == 1:
                return redirect("admin:actions_action_change", chosen[0].pk)
            return redirect("admin:actions_action_changelist")
        if request.method == "POST":
            ids = _valid_ids(request.POST.getlist("ids"))
        else:
            ids = form.initial["ids"]
        selected = list(Action.objects.filter(pk__in=ids).select_related("user"))
        if not selected and request.method == "GET":
            self.message_user(request, "No actions selected.", messages.WARNING)
            return redirect("admin:actions_action_changelist")
        context = {
            **self.admin_site.each_context(request),
            "title": f"{spec['verb']}: {len(selected)} action(s)",
            "verb": spec["verb"],
            "explain": spec["explain"],
            "selected": [(a, a.status in IN_FLIGHT) for a in selected],
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/actions/action/resolve.html", context)

    def _resolve_one(self, request, kind: str, spec: dict, action: Action, note: str) -> None:
        try:
            result = spec["service"](action_id=action.pk, staff_user=request.user, note=note)
        except ActionResolutionError as exc:
            self.message_user(request, f"Action {action.pk}: not done: {exc}", messages.ERROR)
            return
        if kind == "mark-failed":
            self.message_user(request, f"Action {action.pk}: marked failed.", messages.SUCCESS)
            return
        text, ok = resend_outcome_message(action.pk, result)
        self.message_user(request, text, messages.SUCCESS if ok else messages.WARNING)


def _valid_ids(values: list[str]) -> list[str]:
    ids = []
    for value in values:
        for part in value.split(","):
            try:
                ids.append(str(uuid.UUID(part.strip())))
            except ValueError:
                continue
    return ids


class ReadOnlyAdmin(EstimatedCountMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Support staff look; the chain and the passkey registration are where these change.
    Lists that grow with every payment: no full-table count on a page load."""


@admin.register(SmartAccount)
class SmartAccountAdmin(ChainColumn, ReadOnlyAdmin):
    list_display = ("address", "kind", "chain", "user", "owner", "created_at")
    list_filter = ("kind", ChainFilter)
    search_fields = ("address", "user__username", "owner")


@admin.register(Card)
class CardAdmin(ReadOnlyAdmin):
    list_display = ("card_id", "last4", "user", "safe_address", "is_virtual", "token")
    list_filter = ("is_virtual", ChainFilter)
    search_fields = ("card_id", "safe_address", "user__username")
    readonly_fields = ("delay_address", "roles_address")


@admin.register(Passkey)
class PasskeyAdmin(ReadOnlyAdmin):
    list_display = (
        "credential_id",
        "user",
        "owner_state",
        "owner_index",
        "sign_count",
        "created_at",
        "last_used_at",
    )
    list_filter = ("owner_state",)
    search_fields = ("credential_id", "user__username")
    exclude = ("public_key",)


@admin.register(Token)
class TokenAdmin(ChainColumn, admin.ModelAdmin):
    list_display = ("symbol", "name", "chain", "address", "decimals", "price_id")
    list_filter = (ChainFilter,)
    search_fields = ("symbol", "address")


@admin.register(RampAccount)
class RampAccountAdmin(admin.ModelAdmin):
    """Which provider account is the user's; the KYC fields are the provider's word, so they
    are read-only here and refreshed from the provider (on read, or with the action)."""

    list_display = ("user", "currency", "provider", "external_id", "kyc_status", "kyc_checked_at")
    raw_id_fields = ("user",)  # not a <select> of every user
    list_filter = ("currency", "provider", "kyc_status")
    search_fields = ("user__username", "user__email", "external_id")
    readonly_fields = ("kyc_status", "provider_status", "kyc_checked_at", "kyc_error")
    actions = ["refresh_kyc"]

    def has_refresh_kyc_permission(self, request) -> bool:
        return request.user.has_perm("actions.refresh_kyc_rampaccount")

    @admin.action(permissions=["refresh_kyc"], description="Refresh KYC status from the provider")
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
    list_filter = ("kind", ChainFilter)
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


@admin.register(AccountChange)
class AccountChangeAdmin(ReadOnlyAdmin):
    """Owner changes and recoveries: staff see them (and their timeline) but cannot start,
    speed up or cancel one; only the account's passkeys and the chain's delay move them."""

    list_display = ("id", "kind", "status", "user", "account", "ready_at", "created_at")
    list_filter = ("kind", "status")
    search_fields = ("=id", "account", "user__username")


@admin.register(SpendPermission)
class SpendPermissionAdmin(ReadOnlyAdmin):
    """Spending permissions and the transfers signed under them: read-only. The session key
    is never shown (only whether the server still holds one)."""

    list_display = (
        "id",
        "name",
        "status",
        "user",
        "application",
        "allowance",
        "period",
        "token",
        "expires_at",
        "key_held",
    )
    list_filter = ("status", "period")
    search_fields = ("=id", "permission_id", "session_key_address", "user__username")
    list_select_related = ("user", "application", "token")
    exclude = ("session_key_encrypted",)
    readonly_fields = ("key_held", "spends")

    @admin.display(boolean=True, description="server holds its session key")
    def key_held(self, obj: SpendPermission) -> bool:
        return obj.has_key

    @admin.display(description="transfers signed under it")
    def spends(self, obj: SpendPermission) -> str:
        rows = obj.actions.filter(type="transfer").order_by("-created_at")[:50]
        return (
            format_html_join(
                "\n",
                "<div>{} · {} {} → {} · {}</div>",
                (
                    (
                        a.created_at,
                        a.params.get("amount"),
                        a.params.get("symbol"),
                        a.params.get("to"),
                        a.status,
                    )
                    for a in rows
                ),
            )
            or "—"
        )
