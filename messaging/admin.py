from __future__ import annotations

from collections import Counter

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin import LifecycleAdmin, text_cell
from core.lifecycle import IllegalTransition
from messaging.models import (
    Conversation,
    D,
    Delivery,
    Membership,
    SocialAccount,
    Workspace,
)
from messaging.selectors import deliveries_stuck
from messaging.services import delivery_cancel, delivery_resolve_unknown


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


class SocialAccountInline(admin.TabularInline):
    model = SocialAccount
    extra = 0
    fields = ("provider", "handle", "credential_ref")


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "id", "created_at")
    search_fields = ("name", "=id")
    inlines = [MembershipInline, SocialAccountInline]


@admin.register(SocialAccount)
class SocialAccountAdmin(admin.ModelAdmin):
    list_display = ("handle", "provider", "workspace", "credential_ref")
    list_filter = ("provider",)
    search_fields = ("handle",)


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("id", "social_account", "recipient_id", "provider_conversation_id")
    search_fields = ("recipient_id", "provider_conversation_id")


class StuckFilter(admin.SimpleListFilter):
    title = "stuck"
    parameter_name = "stuck"

    def lookups(self, request, model_admin):
        return [("yes", "unknown, past the lease, or due and not picked up")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            # The selector's predicate on this queryset: each branch names its statuses, so
            # the status index finds the few candidates (no `pk IN (subquery)`).
            return queryset & deliveries_stuck()
        return queryset


# The reasons offered are those of the latest failures: a bounded read on the
# (status, created_at) index. Reasons are the provider's free text, so there is no fixed list,
# and SELECT DISTINCT over every failed delivery grew with the table.
REASON_SAMPLE = 1000
REASON_CHOICES = 20


def recent_failure_reasons() -> list[str]:
    # No `reason IS NOT NULL` in SQL: the planner multiplies it with the status and, thinking
    # matches rare, picks a parallel scan (20 ms instead of 3 ms at 1M rows).
    latest = (
        Delivery.objects.filter(status=D.FAILED)
        .order_by("-created_at")
        .values_list("reason", flat=True)[:REASON_SAMPLE]
    )
    reasons = Counter(reason for reason in latest if reason)
    return [reason for reason, _ in reasons.most_common(REASON_CHOICES)]


class FailedReasonFilter(admin.SimpleListFilter):
    title = "failure reason (recent)"
    parameter_name = "reason"

    def lookups(self, request, model_admin):
        return [(reason, reason[:60]) for reason in sorted(recent_failure_reasons())]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(status=D.FAILED, reason=self.value())
        return queryset


class ResolveForm(forms.Form):
    outcome = forms.ChoiceField(choices=[(D.SENT, "sent"), (D.FAILED, "failed")])
    provider_message_id = forms.CharField(required=False, help_text="Required for sent.")
    note = forms.CharField(widget=forms.Textarea, help_text="What you checked, and where.")

    def clean(self):
        data = super().clean()
        if data.get("outcome") == D.SENT and not data.get("provider_message_id", "").strip():
            self.add_error(
                "provider_message_id", "Resolving as sent needs the provider message id."
            )
        return data


@admin.register(Delivery)
class DeliveryAdmin(LifecycleAdmin):
    lifecycle = Delivery.lifecycle
    list_display = (
        "short_id",
        "status",
        "social_account",
        "workspace",
        "created_at",
        "reason_short",
    )
    list_filter = ("status", StuckFilter, FailedReasonFilter, "social_account__provider")
    # Searches are exact lookups on indexes, by the shape of the term (search_exact).
    search_fields = ("provider_message_id", "social_account__handle", "conversation__recipient_id")
    search_help_text = (
        "Exact: a delivery id or idempotency key, a provider message id, a social account "
        "handle or a recipient id."
    )
    list_select_related = ("social_account", "workspace")
    actions = ["cancel_selected"]
    readonly_fields = [f.name for f in Delivery._meta.concrete_fields] + ["links"]
    exclude = ("payload_hash",)

    def search_exact(self, queryset, kind, value, term):
        if kind == "uuid":
            return queryset.filter(Q(pk=value) | Q(idempotency_key=value))
        # Small tables first (accounts, conversations), then the deliveries by their indexes.
        accounts = list(SocialAccount.objects.filter(handle=term).values_list("pk", flat=True))
        conversations = list(
            Conversation.objects.filter(recipient_id=term).values_list("pk", flat=True)[:100]
        )
        return queryset.filter(
            Q(provider_message_id=term)
            | Q(social_account__in=accounts)
            | Q(conversation__in=conversations)
        )

    @admin.display(description="reason or last error")
    def reason_short(self, obj: Delivery) -> str:
        return text_cell(obj.reason or obj.last_error)

    @admin.display(description="links")
    def links(self, obj: Delivery) -> str:
        timeline = self.timeline_link(obj)
        if obj.status == D.UNKNOWN:
            resolve = reverse("admin:messaging_delivery_resolve", args=[obj.pk])
            return format_html('{} · <a href="{}">resolve</a>', timeline, resolve)
        return timeline

    def has_cancel_permission(self, request) -> bool:
        return request.user.has_perm("messaging.cancel_delivery")

    def has_resolve_permission(self, request) -> bool:
        return request.user.has_perm("messaging.resolve_delivery")

    @admin.action(
        permissions=["cancel"], description="Cancel selected deliveries (queued or claimed only)"
    )
    def cancel_selected(self, request, queryset):
        done, refused = 0, []
        for delivery in queryset:
            try:
                delivery_cancel(delivery=delivery, user=request.user, staff=True)
                done += 1
            except IllegalTransition as exc:
                refused.append(f"{delivery.pk} is {exc.current}")
        self.message_user(request, f"Cancelled {done}.")
        if refused:
            self.message_user(request, "Not cancelled: " + "; ".join(refused), messages.WARNING)

    def get_urls(self):
        return [
            path(
                "<uuid:delivery_id>/resolve/",
                self.admin_site.admin_view(self.resolve_view),
                name="messaging_delivery_resolve",
            )
        ] + super().get_urls()

    def resolve_view(self, request, delivery_id):
        # The page shows the delivery: resolving it needs seeing it.
        if not (
            self.has_resolve_permission(request) and self.has_view_or_change_permission(request)
        ):
            raise PermissionDenied
        delivery = get_object_or_404(Delivery, pk=delivery_id)
        form = ResolveForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                delivery_resolve_unknown(
                    delivery_id=delivery.pk,
                    staff_user=request.user,
                    outcome=form.cleaned_data["outcome"],
                    provider_message_id=form.cleaned_data["provider_message_id"],
                    note=form.cleaned_data["note"],
                )
            except IllegalTransition as exc:
                self.message_user(
                    request, f"Not resolved: the delivery is {exc.current}", messages.ERROR
                )
            else:
                self.message_user(request, f"Delivery resolved as {form.cleaned_data['outcome']}.")
            return redirect("admin:messaging_delivery_change", delivery.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Resolve unknown delivery {delivery.pk}",
            "delivery": delivery,
            "form": form,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/messaging/delivery/resolve.html", context)
