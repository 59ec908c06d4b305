from __future__ import annotations

import uuid

from django import forms
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ApiView, InvalidInput, NotFound, PaymentRequired, Unprocessable
from core.lifecycle import IllegalTransition
from core.timeline import render_timeline
from operations import contract
from operations.decisions import (
    operation_review_decide,
)
from operations.models import Channel, Operation, State
from operations.serializers import operation_status_payload, quote_payload
from operations.services import (
    AdmissionError,
    InsufficientCredits,
    operation_submit,
    quote_create,
)


class OperationStatusView(ApiView):
    required_scopes = ["operations:read"]

    @extend_schema(
        operation_id="tong_operation_status",
        responses={
            200: OpenApiTypes.OBJECT,
            404: OpenApiResponse(description="Operation not found: <id>"),
        },
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


class OperationSubmitView(ApiView):
    required_scopes = ["operations:write"]
    input_schema = contract.SUBMIT_INPUT_SCHEMA

    @extend_schema(
        operation_id="tong_operation_submit",
        request=OpenApiTypes.OBJECT,
        responses={
            202: OpenApiTypes.OBJECT,
            402: OpenApiResponse(description="Not enough credits for the hold"),
            422: OpenApiResponse(description="Not admitted (code says why), e.g. Quote not found"),
        },
    )
    def post(self, request: Request) -> Response:
        data = self.input
        quote_id = data.get("quote_id")
        if quote_id is None and data.get("input") is None:
            raise InvalidInput({"input": ["required unless a quote_id brings the submit value"]})
        try:
            operation = operation_submit(
                owner=request.user,
                application=request.auth.application,
                tool=data["tool"],
                category=data["category"],
                channel=data.get("channel", Channel.API),
                model=data.get("model"),
                input_text=data.get("input"),
                quote_id=None if quote_id is None else uuid.UUID(quote_id),
            )
        except InsufficientCredits as exc:
            raise PaymentRequired(str(exc)) from None
        except AdmissionError as exc:
            raise Unprocessable(str(exc), code=exc.code) from None
        return Response(operation_status_payload(operation), status=status.HTTP_202_ACCEPTED)


class QuoteCreateView(ApiView):
    required_scopes = ["operations:write"]
    input_schema = contract.QUOTE_INPUT_SCHEMA

    @extend_schema(
        operation_id="tong_quote_create",
        request=OpenApiTypes.OBJECT,
        responses={
            201: OpenApiTypes.OBJECT,
            422: OpenApiResponse(description="Not quoted (code says why)"),
        },
    )
    def post(self, request: Request) -> Response:
        data = self.input
        try:
            quote = quote_create(
                owner=request.user,
                tool=data["tool"],
                submit_field=data["submit_field"],
                submit_value=data["submit_value"],
                model=data.get("model"),
                operation_name=data.get("operation"),
                configuration=data.get("configuration") or {},
            )
        except AdmissionError as exc:
            raise Unprocessable(str(exc), code=exc.code) from None
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


class ReviewDecisionForm(forms.Form):
    # CharField refuses NUL characters (the note goes into a jsonb history payload) and the
    # length bounds it; an empty note is the service's to refuse, in its own words.
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    note = forms.CharField(required=False, max_length=2000)


@staff_member_required
@permission_required("operations.review_operation", raise_exception=True)
@require_POST
def review_decide(request: HttpRequest, operation_id) -> HttpResponse:
    form = ReviewDecisionForm(request.POST)
    error = None
    if not form.is_valid():
        error = (
            "choose approve or reject"
            if "decision" in form.errors
            else "the note " + " ".join(form.errors["note"]).lower()
        )
    else:
        decision, note = form.cleaned_data["decision"], form.cleaned_data["note"]
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
