from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ApiView, InvalidInput, error_responses
from core.permissions import staff_may_view
from core.timeline import render_timeline
from messaging import contract
from messaging.errors import IdempotencyConflict, NotFound
from messaging.models import MANAGE_ROLES, SEND_ROLES, Delivery, Role
from messaging.selectors import delivery_lookup, social_account_for
from messaging.services import delivery_cancel, delivery_send

READ_ROLES = frozenset(Role.values)


def _account(request: Request, data: dict, roles):
    return social_account_for(
        user=request.user,
        workspace_id=data["workspace_id"],
        social_account_id=data["social_account_id"],
        roles=roles,
    )[0]


class DeliveryStatusView(ApiView):
    """sosoapi_dm_actions_status: delivery facts by action_id or idempotency_key."""

    required_scopes = ["agent:dm_read"]
    input_schema = contract.STATUS_INPUT_SCHEMA

    @extend_schema(
        operation_id="sosoapi_dm_actions_status",
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, **error_responses(NotFound)},
        description="After losing a response, look up delivery facts by action_id or the "
        "original idempotency_key. An unknown delivery is not a failure and must not be re-sent.",
    )
    def post(self, request: Request) -> Response:
        data = self.input
        if "action_id" not in data and "idempotency_key" not in data:
            raise InvalidInput({"(body)": ["one of action_id or idempotency_key is required"]})
        account = _account(request, data, READ_ROLES)
        delivery = delivery_lookup(
            account=account,
            action_id=data.get("action_id"),
            idempotency_key=data.get("idempotency_key"),
        )
        return Response(contract.action_payload(delivery))


class DeliverySendView(ApiView):
    required_scopes = ["agent:dm_write"]
    input_schema = contract.SEND_INPUT_SCHEMA

    @extend_schema(
        operation_id="sosoapi_dm_actions_send",
        request=OpenApiTypes.OBJECT,
        responses={
            202: OpenApiTypes.OBJECT,
            200: OpenApiTypes.OBJECT,
            **error_responses(
                (404, "Social account not found in this workspace"), IdempotencyConflict
            ),
        },
        description="Queue a DM. The same idempotency_key with the same payload returns the "
        "existing action (200); with a different payload it is refused (409).",
    )
    def post(self, request: Request) -> Response:
        data = self.input
        if ("conversation_id" in data) == ("recipient_id" in data):
            raise InvalidInput(
                {"(body)": ["exactly one of conversation_id or recipient_id is required"]}
            )
        _account(request, data, SEND_ROLES)
        result = delivery_send(
            user=request.user,
            application=request.auth.application,
            workspace_id=data["workspace_id"],
            social_account_id=data["social_account_id"],
            conversation_id=data.get("conversation_id"),
            recipient_id=data.get("recipient_id"),
            text=data["text"],
            idempotency_key=uuid.UUID(data["idempotency_key"]),
        )
        return Response(
            contract.action_payload(result.delivery),
            status=status.HTTP_202_ACCEPTED if result.created else status.HTTP_200_OK,
        )


class DeliveryCancelView(ApiView):
    required_scopes = ["agent:dm_write"]
    input_schema = contract.CANCEL_INPUT_SCHEMA

    @extend_schema(
        operation_id="sosoapi_dm_actions_cancel",
        request=OpenApiTypes.OBJECT,
        responses={
            200: OpenApiTypes.OBJECT,
            **error_responses(
                NotFound, (409, "Only queued or claimed deliveries can be cancelled")
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = self.input
        account = _account(request, data, SEND_ROLES | MANAGE_ROLES)
        delivery = delivery_lookup(account=account, action_id=data["action_id"])
        delivery = delivery_cancel(delivery=delivery, user=request.user)
        return Response(contract.action_payload(delivery))


@staff_may_view(Delivery)
def delivery_timeline(request: HttpRequest, delivery_id) -> HttpResponse:
    delivery = get_object_or_404(
        Delivery.objects.select_related("social_account", "conversation", "workspace"),
        pk=delivery_id,
    )
    return render_timeline(
        request,
        template="messaging/delivery_timeline.html",
        version=delivery.updated_at.isoformat(),
        is_terminal=delivery.is_terminal,
        context={"delivery": delivery, "history": delivery.history.all()},
    )
