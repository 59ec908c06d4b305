from __future__ import annotations

import logging

from django import forms
from django.conf import settings
from django.contrib import messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    extend_schema_view,
)
from rest_framework.request import Request
from rest_framework.response import Response

from actions import contract
from actions.accounts.models import AccountChange
from actions.accounts.public import smart_accounts_cover_chains, smart_accounts_for_user
from actions.bridges.public import action_outcome, bridge_leg_of, leg_detail, leg_open
from actions.errors import DEPENDENCIES_DOC, ActionNotFound, dependency_error
from actions.execution.models import IN_FLIGHT, PENDING_ON_CHAIN, Action, ActionStatus
from actions.execution.public import (
    ActionResolutionError,
    ReconcileOutcome,
    action_expire_if_overdue,
    action_mark_failed,
    action_resend,
    action_status_for_client,
    action_status_refresh,
    action_status_statement,
    action_with_history,
)
from actions.history.public import history_sync
from actions.permissions.models import SpendPermission
from actions.permissions.public import spend_permission_request, spend_permissions_for_agent
from actions.presenters import (
    action_status_payload,
    profile_for_user,
    smart_account_payload,
    transactions_page,
)
from actions.proposals.public import (
    card_limit_propose,
    card_state_propose,
    swap_propose,
    transfer_propose,
)
from actions.ramps.public import ramps_refresh_for_user
from actions.serializers import ActionStatusSerializer
from actions.tool_reads import balances_for_user, card_for_user
from core.api import ApiView, error_response, error_responses
from core.chains import chain_name
from core.formats import rfc3339
from core.permissions import staff_may_view
from core.timeline import render_timeline
from core.token_reads import read_with_token

logger = logging.getLogger(__name__)


def action_created_payload(action: Action) -> dict:
    """A proposal to sign (sign_url), or a transfer its spending permission signed (no
    sign_url; `signed_by_permission` names it). `permission_note`: why a permission of the
    agent did not cover it."""
    by_permission = action.status != ActionStatus.PROPOSED and action.spend_permission_id
    payload = {
        "action_id": str(action.pk),
        "type": action.type,
        "status": action.status,
        "summary": action.summary,
        "sign_url": None
        if by_permission
        else f"{settings.PUBLIC_BASE_URL}{reverse('sign', args=[action.pk])}",
        "resource_uri": action.resource_uri,
        "user_op_hash": action.user_op_hash,
        "expires_at": rfc3339(action.expires_at),
    }
    if by_permission:
        payload["signed_by_permission"] = action.spend_permission.name
    if note := (action.params or {}).get("permission_note"):
        payload["permission_note"] = note
    return payload


class ActionToolView(ApiView):
    """An action tool: the body validated against the tool's schema, propose, answer with
    sign_url (201). A ToolError is the user's input refused in words (400); a chain, bundler
    or provider that failed is a 503 (actions.errors.dependency_error)."""

    required_scopes = ["write:actions"]
    dependency_errors = staticmethod(dependency_error)

    def propose(self, request: Request, data: dict) -> Action:
        raise NotImplementedError

    def post(self, request: Request) -> Response:
        action = self.propose(request, self.input)
        return Response(action_created_payload(action), status=201)


TOOL_RESPONSES = {201: OpenApiTypes.OBJECT, **error_responses((503, DEPENDENCIES_DOC))}


def tool_schema(operation_id: str):
    """The OpenAPI of an action tool's POST: its id, a JSON body, 201 or the errors above."""
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id, request=OpenApiTypes.OBJECT, responses=TOOL_RESPONSES
        )
    )


@tool_schema("transfer")
class TransferView(ActionToolView):
    """transfer: propose sending an ERC-20 from the user's smart account; the user signs."""

    input_schema = contract.TRANSFER_INPUT_SCHEMA

    def propose(self, request: Request, data: dict) -> Action:
        return transfer_propose(
            user=request.user,
            application=request.auth.application,
            asset_id=data["asset_id"],
            amount=data["amount"],
            to=data["to"],
        )


@tool_schema("swap")
class SwapView(ActionToolView):
    """swap: propose swapping between two CAIP-19 assets at a provider's quote; the user signs."""

    input_schema = contract.SWAP_INPUT_SCHEMA

    def propose(self, request: Request, data: dict) -> Action:
        return swap_propose(
            user=request.user,
            application=request.auth.application,
            from_asset_id=data["from_asset_id"],
            to_asset_id=data["to_asset_id"],
            amount=data["amount"],
            slippage=data.get("slippage"),
            provider=data.get("provider"),
        )


@tool_schema("card_freeze")
class CardFreezeView(ActionToolView):
    """card_freeze: off-chain; the passkey signs SIWE for the card's Safe (EIP-1271)."""

    input_schema = contract.CARD_STATE_INPUT_SCHEMA
    frozen = True

    def propose(self, request: Request, data: dict) -> Action:
        return card_state_propose(
            user=request.user,
            application=request.auth.application,
            frozen=self.frozen,
            card_id=data.get("card_id"),
        )


@tool_schema("card_unfreeze")
class CardUnfreezeView(CardFreezeView):
    """card_unfreeze: the symmetric counterpart of card_freeze."""

    frozen = False


@tool_schema("card_limit")
class CardLimitView(ActionToolView):
    """card_limit: change the card's daily limit (delay module + scheduled transaction)."""

    input_schema = contract.CARD_LIMIT_INPUT_SCHEMA

    def propose(self, request: Request, data: dict) -> Action:
        return card_limit_propose(
            user=request.user,
            application=request.auth.application,
            daily_limit=data["daily_limit"],
            card_id=data.get("card_id"),
        )


@tool_schema("request_spend_permission")
class RequestSpendPermissionView(ActionToolView):
    """request_spend_permission: ask the user, once, for an allowance per period that this
    agent may spend without a prompt; enforced by the account's contract."""

    input_schema = contract.REQUEST_SPEND_PERMISSION_INPUT_SCHEMA

    def propose(self, request: Request, data: dict) -> Action:
        return spend_permission_request(
            user=request.user,
            application=request.auth.application,
            asset_id=data["asset_id"],
            amount=data["amount"],
            period=data["period"],
            expires_at=data["expires_at"],
            recipients=data.get("recipients"),
            any_recipient=data.get("any_recipient", False),
            starts_at=data.get("starts_at"),
            purpose=data.get("purpose", ""),
            name=data.get("name", ""),
            to_asset_id=data.get("to_asset_id"),
        )


class SpendPermissionsView(ApiView):
    """get_spend_permissions: the calling agent's own permissions, with what remains of this
    period's allowance (read from the chain)."""

    required_scopes = ["read:actions"]
    input_schema = contract.NO_INPUT_SCHEMA

    @extend_schema(operation_id="get_spend_permissions", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        return Response(
            {
                "permissions": spend_permissions_for_agent(
                    user=request.user, application=request.auth.application
                )
            }
        )


class SmartAccountsView(ApiView):
    """get_smart_accounts: the Picnic and Gnosis Pay accounts the user's passkey controls."""

    required_scopes = ["read:accounts"]
    input_schema = contract.NO_INPUT_SCHEMA

    @extend_schema(operation_id="get_smart_accounts", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        smart_accounts_cover_chains(user=request.user)  # a chain added since registration
        accounts = smart_accounts_for_user(user=request.user)
        return Response({"smartAccounts": [smart_account_payload(a) for a in accounts]})


CHAIN_DOWN = error_response("The chain could not be read: <reason>")


class BalancesView(ApiView):
    """get_balances: token balances on those accounts, from the chain, with fiat values."""

    required_scopes = ["read:balances"]
    input_schema = contract.NO_INPUT_SCHEMA

    @extend_schema(
        operation_id="get_balances", responses={200: OpenApiTypes.OBJECT, 503: CHAIN_DOWN}
    )
    def get(self, request: Request) -> Response:
        smart_accounts_cover_chains(user=request.user)  # a chain added since registration
        # Every chain failed: ChainsUnavailable says which and why (503), inventing nothing.
        return Response(balances_for_user(user=request.user))


class CardView(ApiView):
    """get_card: state, balances, daily allowance and period of the user's Picnic card."""

    required_scopes = ["read:card"]
    input_schema = contract.CARD_INPUT_SCHEMA
    dependency_errors = staticmethod(dependency_error)  # the card chain's node failed

    @extend_schema(
        operation_id="get_card",
        parameters=[OpenApiParameter("card_id", str, required=False)],
        responses={
            200: OpenApiTypes.OBJECT,
            **error_responses((404, "No Picnic card for this user")),
            503: CHAIN_DOWN,
        },
    )
    def get(self, request: Request) -> Response:
        return Response(card_for_user(user=request.user, card_id=self.input.get("card_id")))


class TransactionsView(ApiView):
    """get_transactions: the user's history, newest first, cursor-paginated. The first page
    (no cursor) brings the index up to date first; later pages only read it."""

    required_scopes = ["read:transactions"]
    input_schema = contract.TRANSACTIONS_INPUT_SCHEMA

    @extend_schema(
        operation_id="get_transactions",
        parameters=[
            OpenApiParameter("cursor", str, required=False),
            OpenApiParameter("limit", int, required=False, description="1-100, default 20"),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request) -> Response:
        cursor = self.input.get("cursor") or None
        sync = None if cursor else history_sync(user=request.user)
        page = transactions_page(
            user=request.user, cursor=cursor, limit=self.input.get("limit", 20)
        )
        return Response({**page, "sync": sync})


class ProfileView(ApiView):
    """get_profile: userId, email, fiat ramps keyed by currency with normalised KYC, cards."""

    required_scopes = ["read:profile"]
    input_schema = contract.NO_INPUT_SCHEMA

    @extend_schema(operation_id="get_profile", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        ramps_refresh_for_user(user=request.user)  # a provider that fails keeps the last status
        return Response(profile_for_user(user=request.user))


class ActionStatusView(ApiView):
    """get_action_status: the current state of an action, reconciled on read. Its input is
    the path's action_id: a malformed one is not found, as the seed says."""

    required_scopes = ["read:actions"]

    def perform_authentication(self, request: Request) -> None:
        # The token and the action in one statement (core.token_reads): one round trip.
        statement = action_status_statement(action_id=self.kwargs["action_id"])
        if statement is None:
            return super().perform_authentication(request)
        with read_with_token(*statement) as self.status_read:
            super().perform_authentication(request)

    @extend_schema(
        operation_id="get_action_status",
        summary="Read the current state of a pending or past action",
        description=(
            "Polling fallback for `picnic://action/{action_id}`. Not strictly read-only: for a "
            "`submitted` or `broadcast` action it asks the bundler for the userOp receipt "
            "first and may advance the status to `executed` or `failed` (best-effort)."
        ),
        parameters=[
            OpenApiParameter("action_id", str, OpenApiParameter.PATH, description="Action ID")
        ],
        responses={
            200: ActionStatusSerializer,
            401: error_response("Missing or invalid bearer token"),
            403: error_response(
                "Missing scope read:actions, or the action belongs to another user or OAuth client"
            ),
            **error_responses(ActionNotFound),
        },
    )
    def get(self, request: Request, action_id: str) -> Response:
        read = getattr(self, "status_read", None)
        action = action_status_for_client(
            action_id=action_id,
            user=request.user,
            application=request.auth.application,
            **({"row": read.row} if read is not None and read.read else {}),
        )
        if action_status_refresh(action=action) is not action or action.status in PENDING_ON_CHAIN:
            # Expired or reconciled just now: read what that wrote.
            action = action_with_history(action_id=action.pk)
        return Response(action_status_payload(action))


@staff_may_view(Action)
def action_timeline(request: HttpRequest, action_id) -> HttpResponse:
    """Staff page: the live status timeline of one action (see core.timeline)."""
    action = action_expire_if_overdue(action=get_object_or_404(Action, pk=action_id))
    leg = bridge_leg_of(action)
    # Beside the status: a refunded or partial bridge is not shown as a success.
    outcome = action_outcome(action, leg)[0]
    return render_timeline(
        request,
        template="actions/action_timeline.html",
        version=action.updated_at.isoformat(),
        # An executed cross-chain swap stays live until its bridge has finished.
        is_terminal=action.is_terminal and not leg_open(action, leg),
        context={
            "action": action_with_history(action_id=action.pk),
            "bridge_leg": leg,
            "bridge_detail": leg_detail(leg) if leg else "",
            "bridge_destination": chain_name(leg.to_chain_id) if leg else "",
            "outcome": outcome,
            "status_note": f"outcome: {outcome}" if leg else "",
            "in_flight": action.status in IN_FLIGHT,
            "can_resolve": request.user.has_perm("actions.resolve_action"),
        },
    )


@staff_may_view(AccountChange)
def account_change_timeline(request: HttpRequest, change_id) -> HttpResponse:
    """Staff page: the live timeline of one account change (a recovery included). Read-only:
    staff can neither start, speed up nor cancel a change; only the account's owners can."""
    change = get_object_or_404(
        AccountChange.objects.select_related("user", "passkey", "signer", "target"), pk=change_id
    )
    return render_timeline(
        request,
        template="actions/account_change_timeline.html",
        version=f"{change.updated_at.isoformat()}|{change.status}",
        is_terminal=change.is_terminal,
        context={"change": change, "history": change.history.all()},
    )


@staff_may_view(SpendPermission)
def spend_permission_timeline(request: HttpRequest, permission_id) -> HttpResponse:
    """Staff page: one spending permission, its history and the actions it carried (grant,
    spends, revocation). Read-only; no key material."""
    permission = get_object_or_404(
        SpendPermission.objects.select_related("user", "application", "token", "account"),
        pk=permission_id,
    )
    return render_timeline(
        request,
        template="actions/spend_permission_timeline.html",
        version=f"{permission.updated_at.isoformat()}|{permission.status}",
        is_terminal=permission.is_terminal,
        context={
            "permission": permission,
            "history": permission.history.all(),
            "actions": Action.objects.filter(
                Q(spend_permission=permission) | Q(pk=permission.grant_action_id)
            ).order_by("created_at")[:200],
        },
    )


def resend_outcome_message(action_id, outcome: ReconcileOutcome) -> tuple[str, bool]:
    """What staff read after a re-send (admin and timeline), and whether it went well."""
    action = Action.objects.get(pk=action_id)
    text = f"Action {action_id}: re-sent ({outcome}); it is now {action.status}"
    problem = action.last_reconcile_error or action.error or ""
    if outcome == ReconcileOutcome.UNAVAILABLE or problem:
        return f"{text}: {problem or 'the provider did not answer'}", False
    return f"{text}.", True


class StaffNoteForm(forms.Form):
    # CharField refuses NUL characters (PostgreSQL text cannot hold them); an empty note is the
    # service's to refuse, in its own words.
    note = forms.CharField(required=False, max_length=1000)


def _staff_note(request: HttpRequest) -> str:
    form = StaffNoteForm(request.POST)
    if not form.is_valid():
        raise ActionResolutionError("the note " + " ".join(form.errors["note"]).lower())
    return form.cleaned_data["note"]


@staff_may_view(Action, "actions.resolve_action")
@require_POST
def action_mark_failed_view(request: HttpRequest, action_id) -> HttpResponse:
    """Staff timeline: end an in-flight action as failed, with the required note."""
    action = get_object_or_404(Action, pk=action_id)
    try:
        action_mark_failed(action_id=action.pk, staff_user=request.user, note=_staff_note(request))
    except ActionResolutionError as exc:
        messages.error(request, f"Not marked failed: {exc}")
    else:
        messages.success(request, "Marked failed; your note is in the history.")
    return redirect("actions-staff:action-timeline", action.pk)


@staff_may_view(Action, "actions.resolve_action")
@require_POST
def action_resend_view(request: HttpRequest, action_id) -> HttpResponse:
    """Staff timeline: deliver an in-flight action again now, with the required note."""
    action = get_object_or_404(Action, pk=action_id)
    try:
        outcome = action_resend(
            action_id=action.pk, staff_user=request.user, note=_staff_note(request)
        )
    except ActionResolutionError as exc:
        messages.error(request, f"Not re-sent: {exc}")
    else:
        text, ok = resend_outcome_message(action.pk, outcome)
        (messages.success if ok else messages.warning)(request, text)
    return redirect("actions-staff:action-timeline", action.pk)
