from __future__ import annotations

import uuid

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, PermissionDenied, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from messaging import contract
from messaging.models import MANAGE_ROLES, SEND_ROLES, Delivery, Role
from messaging.selectors import Forbidden, delivery_lookup, social_account_for
from messaging.selectors import NotFound as LookupNotFound
from messaging.services import IdempotencyConflict, delivery_cancel, delivery_send
from picnic.api import RequiredScopes
from picnic.lifecycle import IllegalTransition
from picnic.timeline import render_timeline

READ_ROLES = frozenset(Role.values)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


def _validated(schema, data) -> dict:
    errors = contract.validation_errors(schema, data)
    if errors:
        raise ValidationError({"detail": "Invalid input", "errors": errors})
    return data


def _account(request: Request, data: dict, roles):
    try:
        return social_account_for(
            user=request.user,
            workspace_id=data["workspace_id"],
            social_account_id=data["social_account_id"],
            roles=roles,
        )[0]
    except LookupNotFound as exc:
        raise NotFound(str(exc)) from None
    except Forbidden as exc:
        raise PermissionDenied(str(exc)) from None


class DeliveryStatusView(APIView):
    """sosoapi_dm_actions_status: delivery facts by action_id or idempotency_key."""

    permission_classes = [RequiredScopes]
    required_scopes = ["agent:dm_read"]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="sosoapi_dm_actions_status",
        request=OpenApiTypes.OBJECT,
        responses={
            200: OpenApiTypes.OBJECT,
            400: OpenApiResponse(description="Invalid input"),
            404: OpenApiResponse(description="Delivery not found"),
        },
        description="After losing a response, look up delivery facts by action_id or the "
        "original idempotency_key. An unknown delivery is not a failure and must not be re-sent.",
    )
    def post(self, request: Request) -> Response:
        data = _validated(contract.STATUS_INPUT_SCHEMA, request.data)
        if "action_id" not in data and "idempotency_key" not in data:
            raise ValidationError(
                {
                    "detail": "Invalid input",
                    "errors": ["(body): one of action_id or idempotency_key is required"],
                }
            )
        account = _account(request, data, READ_ROLES)
        try:
            delivery = delivery_lookup(
                account=account,
                action_id=data.get("action_id"),
                idempotency_key=data.get("idempotency_key"),
            )
        except LookupNotFound as exc:
            raise NotFound(str(exc)) from None
        return Response(contract.action_payload(delivery))


class DeliverySendView(APIView):
    permission_classes = [RequiredScopes]
    required_scopes = ["agent:dm_write"]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="sosoapi_dm_actions_send",
        request=OpenApiTypes.OBJECT,
        responses={202: OpenApiTypes.OBJECT, 200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT},
        description="Queue a DM. The same idempotency_key with the same payload returns the "
        "existing action (200); with a different payload it is refused (409).",
    )
    def post(self, request: Request) -> Response:
        data = _validated(contract.SEND_INPUT_SCHEMA, request.data)
        if ("conversation_id" in data) == ("recipient_id" in data):
            raise ValidationError(
                {
                    "detail": "Invalid input",
                    "errors": [
                        "(body): exactly one of conversation_id or recipient_id is required"
                    ],
                }
            )
        _account(request, data, SEND_ROLES)
        try:
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
        except LookupNotFound as exc:
            raise NotFound(str(exc)) from None
        except IdempotencyConflict as exc:
            raise Conflict(str(exc)) from None
        return Response(
            contract.action_payload(result.delivery),
            status=status.HTTP_202_ACCEPTED if result.created else status.HTTP_200_OK,
        )


class DeliveryCancelView(APIView):
    permission_classes = [RequiredScopes]
    required_scopes = ["agent:dm_write"]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="sosoapi_dm_actions_cancel",
        request=OpenApiTypes.OBJECT,
        responses={200: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        data = _validated(contract.CANCEL_INPUT_SCHEMA, request.data)
        account = _account(request, data, SEND_ROLES | MANAGE_ROLES)
        try:
            delivery = delivery_lookup(account=account, action_id=data["action_id"])
            delivery = delivery_cancel(delivery=delivery, user=request.user)
        except LookupNotFound as exc:
            raise NotFound(str(exc)) from None
        except Forbidden as exc:
            raise PermissionDenied(str(exc)) from None
        except IllegalTransition as exc:
            raise Conflict(
                f"Only queued or claimed deliveries can be cancelled; this one is {exc.current}"
            ) from None
        return Response(contract.action_payload(delivery))


@staff_member_required
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
