from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from operations.models import Channel, Operation, State
from operations.serializers import operation_status_payload, quote_payload
from operations.services import (
    AdmissionError,
    InsufficientCredits,
    operation_review_decide,
    operation_submit,
    quote_create,
)
from picnic.api import RequiredScopes
from picnic.lifecycle import IllegalTransition
from picnic.timeline import render_timeline


class PaymentRequired(APIException):
    status_code = status.HTTP_402_PAYMENT_REQUIRED
    default_code = "insufficient_credits"


class Unprocessable(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "admission_failed"


def _text(data: dict, name: str, *, required: bool = True, max_length: int = 200) -> str | None:
    value = data.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > max_length:
        raise ValidationError({name: f"a non-empty string of at most {max_length} characters"})
    return value


class OperationStatusView(APIView):
    permission_classes = [RequiredScopes]
    required_scopes = ["operations:read"]

    @extend_schema(
        operation_id="tong_operation_status",
        responses={200: OpenApiTypes.OBJECT},
        description="An accepted request is not a finished generation. Follow the "
        "work until the result is ready.",
    )
    def get(self, request: Request, operation_id: str) -> Response:
        try:
            pk = uuid.UUID(operation_id)
        except ValueError:
            raise NotFound(f"Operation not found: {operation_id}") from None
        # Another owner's operation answers exactly like a missing one.
        operation = (
            Operation.objects.select_related("quote")
            .prefetch_related("components")
            .filter(pk=pk, owner=request.user)
            .first()
        )
        if operation is None:
            raise NotFound(f"Operation not found: {operation_id}")
        return Response(operation_status_payload(operation))


class OperationSubmitView(APIView):
    permission_classes = [RequiredScopes]
    required_scopes = ["operations:write"]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="tong_operation_submit",
        request=OpenApiTypes.OBJECT,
        responses={202: OpenApiTypes.OBJECT, 402: OpenApiTypes.OBJECT, 422: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        unknown = set(data) - {"tool", "category", "channel", "model", "input", "quote_id"}
        if unknown:
            raise ValidationError({"detail": f"unknown fields: {', '.join(sorted(unknown))}"})
        channel = data.get("channel", Channel.API)
        if channel not in Channel.values:
            raise ValidationError({"channel": "api or mcp"})
        quote_id = data.get("quote_id")
        if quote_id is not None:
            try:
                quote_id = uuid.UUID(str(quote_id))
            except ValueError:
                raise ValidationError({"quote_id": "a UUID"}) from None
        try:
            operation = operation_submit(
                owner=request.user,
                application=request.auth.application,
                tool=_text(data, "tool"),
                category=_text(data, "category"),
                channel=channel,
                model=_text(data, "model", required=False),
                input_text=_text(data, "input", required=quote_id is None, max_length=100_000),
                quote_id=quote_id,
            )
        except InsufficientCredits as exc:
            raise PaymentRequired(str(exc)) from None
        except AdmissionError as exc:
            raise Unprocessable(str(exc), code=exc.code) from None
        return Response(operation_status_payload(operation), status=status.HTTP_202_ACCEPTED)


class QuoteCreateView(APIView):
    permission_classes = [RequiredScopes]
    required_scopes = ["operations:write"]
    parser_classes = [JSONParser]

    @extend_schema(
        operation_id="tong_quote_create",
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        configuration = data.get("configuration") or {}
        if not isinstance(configuration, dict):
            raise ValidationError({"configuration": "an object"})
        quote = quote_create(
            owner=request.user,
            tool=_text(data, "tool"),
            submit_field=_text(data, "submit_field"),
            submit_value=_text(data, "submit_value", max_length=100_000),
            model=_text(data, "model", required=False),
            operation_name=_text(data, "operation", required=False),
            configuration=configuration,
        )
        return Response(quote_payload(quote), status=status.HTTP_201_CREATED)


@staff_member_required
def operation_timeline(request: HttpRequest, operation_id) -> HttpResponse:
    operation = get_object_or_404(Operation.objects.select_related("owner"), pk=operation_id)
    return render_timeline(
        request,
        template="operations/operation_timeline.html",
        version=operation.updated_at.isoformat(),
        is_terminal=operation.is_terminal,
        context={
            "operation": operation,
            "history": operation.history.all(),
            "payload": operation_status_payload(operation),
        },
    )


@staff_member_required
def review_queue(request: HttpRequest) -> HttpResponse:
    pending = (
        Operation.objects.filter(state=State.NEEDS_REVIEW)
        .select_related("owner")
        .order_by("created_at")
    )
    template = (
        "operations/review_queue.html#queue" if request.htmx else "operations/review_queue.html"
    )
    return render(request, template, {"pending": pending})


@staff_member_required
@require_POST
def review_decide(request: HttpRequest, operation_id) -> HttpResponse:
    decision = request.POST.get("decision")
    note = request.POST.get("note", "")
    error = None
    if decision not in ("approve", "reject"):
        error = "choose approve or reject"
    else:
        try:
            operation_review_decide(
                operation_id=operation_id,
                staff_user=request.user,
                approve=decision == "approve",
                note=note,
            )
        except ValueError as exc:
            error = str(exc)
        except IllegalTransition as exc:
            error = f"this operation is {exc.current} now"
    if not request.htmx:
        if error:
            messages.error(request, error)
        return redirect("operations-staff:review-queue")
    pending = (
        Operation.objects.filter(state=State.NEEDS_REVIEW)
        .select_related("owner")
        .order_by("created_at")
    )
    return render(
        request,
        "operations/review_queue.html#queue",
        {"pending": pending, "error": error, "error_for": str(operation_id)},
    )
