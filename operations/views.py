from __future__ import annotations

import uuid
from urllib.parse import urlencode, urlsplit, urlunsplit

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from core.api import ApiView, InvalidInput, error_responses
from core.formats import rfc3339
from core.lifecycle import IllegalTransition
from core.permissions import staff_may_view
from core.timeline import render_timeline
from operations import contract
from operations.decisions import (
    operation_review_decide,
)
from operations.errors import (
    AdmissionError,
    InsufficientCredits,
    NotCancellable,
    OperationNotFound,
    ResultExpired,
)
from operations.models import Channel, Operation, State
from operations.selectors import (
    BadCursor,
    operation_get_for_client,
    review_cursor_position,
    review_queue_count,
    review_queue_page,
)
from operations.serializers import operation_status_payload, quote_payload
from operations.services import (
    operation_cancel_by_owner,
    operation_submit,
    quote_create,
)


def _owned(request: Request, operation_id: str) -> Operation:
    """The caller's operation, or 404: a malformed id, another owner's operation and another
    agent's of the same owner answer exactly like a missing one."""
    return operation_get_for_client(
        operation_id=operation_id, user=request.user, application=request.auth.application
    )


def request_channel(request: Request) -> str:
    """Which channel an operation came through, from the bearer token, never from the body:
    a token issued for the MCP server (its RFC 8707 audience names MCP_RESOURCE_URL) is an
    MCP call, any other an API call. An API caller cannot make one channel look like the
    other, since the audience is fixed when the token is issued."""
    # oauth.policy.canonical's comparison (scheme and host lowercased, no trailing slash);
    # operations may not import oauth (a sibling on its layer), and this is all it needs.
    mcp = _canonical(settings.MCP_RESOURCE_URL)
    audiences = getattr(request.auth, "resource", None) or ()
    return (
        Channel.MCP
        if any(isinstance(a, str) and _canonical(a) == mcp for a in audiences)
        else Channel.API
    )


def _canonical(uri: str) -> str:
    try:
        parts = urlsplit(uri)
    except ValueError:
        return ""
    return urlunsplit(
        (parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, "")
    )


class OperationStatusView(ApiView):
    required_scopes = ["operations:read"]

    @extend_schema(
        operation_id="tong_operation_status",
        responses={200: OpenApiTypes.OBJECT, **error_responses(OperationNotFound)},
        description="An accepted request is not a finished generation. Follow the "
        "work until the result is ready.",
    )
    def get(self, request: Request, operation_id: str) -> Response:
        return Response(operation_status_payload(_owned(request, operation_id)))


class OperationCancelView(ApiView):
    required_scopes = ["operations:write"]

    @extend_schema(
        operation_id="tong_operation_cancel",
        request=None,
        responses={
            200: OpenApiTypes.OBJECT,
            **error_responses(OperationNotFound, NotCancellable),
        },
        description="Cancel a queued, waiting, paused or needs_review operation; the hold is "
        "released.",
    )
    def post(self, request: Request, operation_id: str) -> Response:
        operation = _owned(request, operation_id)
        operation = operation_cancel_by_owner(
            operation_id=operation.pk,
            owner=request.user,
            application=request.auth.application,
        )
        return Response(operation_status_payload(Operation.objects.get(pk=operation.pk)))


class OperationResultView(ApiView):
    required_scopes = ["operations:read"]

    @extend_schema(
        operation_id="tong_operation_result",
        responses={
            200: OpenApiTypes.OBJECT,
            **error_responses(OperationNotFound, ResultExpired),
        },
        description="The generated output, kept until detail_expires_at.",
    )
    def get(self, request: Request, operation_id: str) -> Response:
        operation = _owned(request, operation_id)
        if operation.detail_expired or (
            operation.detail_expires_at is not None
            and operation.detail_expires_at <= timezone.now()
        ):
            raise ResultExpired(
                f"The result of operation {operation.pk} expired at "
                f"{rfc3339(operation.detail_expires_at)}; it is no longer kept"
            )
        return Response(
            {
                "operation_id": str(operation.pk),
                "state": operation.state,
                "ready": operation.state == State.SUCCEEDED,
                "result": operation.result,
                "detail_expires_at": rfc3339(operation.detail_expires_at),
            }
        )


class OperationSubmitView(ApiView):
    required_scopes = ["operations:write"]
    input_schema = contract.SUBMIT_INPUT_SCHEMA

    @extend_schema(
        operation_id="tong_operation_submit",
        request=OpenApiTypes.OBJECT,
        responses={
            202: OpenApiTypes.OBJECT,
            **error_responses(InsufficientCredits, AdmissionError),
        },
    )
    def post(self, request: Request) -> Response:
        data = self.input
        quote_id = data.get("quote_id")
        if quote_id is None and data.get("input") is None:
            raise InvalidInput({"input": ["required unless a quote_id brings the submit value"]})
        channel = request_channel(request)
        if data.get("channel") not in (None, channel):
            raise InvalidInput(
                {"channel": [f"is {channel}: the token this call came with sets it"]}
            )
        operation = operation_submit(
            owner=request.user,
            application=request.auth.application,
            tool=data["tool"],
            category=data["category"],
            channel=channel,
            model=data.get("model"),
            input_text=data.get("input"),
            quote_id=None if quote_id is None else uuid.UUID(quote_id),
            idempotency_key=data.get("idempotency_key"),
        )
        # A repeat of a start (same idempotency key) is the same operation, as it is now.
        return Response(
            operation_status_payload(operation),
            status=status.HTTP_200_OK if operation.repeated else status.HTTP_202_ACCEPTED,
        )


class QuoteCreateView(ApiView):
    required_scopes = ["operations:write"]
    input_schema = contract.QUOTE_INPUT_SCHEMA

    @extend_schema(
        operation_id="tong_quote_create",
        request=OpenApiTypes.OBJECT,
        responses={
            201: OpenApiTypes.OBJECT,
            **error_responses((422, "Not quoted (code says why)")),
        },
    )
    def post(self, request: Request) -> Response:
        data = self.input
        quote = quote_create(
            owner=request.user,
            application=request.auth.application,
            tool=data["tool"],
            submit_field=data["submit_field"],
            submit_value=data["submit_value"],
            model=data.get("model"),
            operation_name=data.get("operation"),
            configuration=data.get("configuration") or {},
        )
        return Response(
            {**quote_payload(quote), "breakdown": quote.breakdown},
            status=status.HTTP_201_CREATED,
        )


@staff_may_view(Operation)
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


def _queue_context(after: str | None) -> dict:
    """One page of the review queue after the cursor `after` (BadCursor for a made-up one)."""
    pending, next_after = review_queue_page(after=after or None)
    return {
        "pending": pending,
        "after": after or "",
        "next_after": next_after,
        "waiting": review_queue_count(),
    }


@staff_may_view(Operation)
def review_queue(request: HttpRequest) -> HttpResponse:
    try:
        context = _queue_context(request.GET.get("after"))
    except BadCursor as exc:
        return HttpResponseBadRequest(str(exc))
    template = (
        "operations/review_queue.html#queue" if request.htmx else "operations/review_queue.html"
    )
    return render(request, template, context)


class ReviewDecisionForm(forms.Form):
    # CharField refuses NUL characters (the note goes into a jsonb history payload) and the
    # length bounds it; an empty note is the service's to refuse, in its own words.
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    note = forms.CharField(required=False, max_length=2000)


@staff_may_view(Operation, "operations.review_operation")
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
    # Back to the page the decision was made on (its cursor came with the form).
    after = request.POST.get("after", "")
    if not request.htmx:
        if error:
            messages.error(request, error)
        try:
            if after:
                review_cursor_position(after)
        except BadCursor:
            after = ""  # the decision is saved: back to the first page, as the htmx path does
        queue = reverse("operations-staff:review-queue")
        return redirect(f"{queue}?{urlencode({'after': after})}" if after else queue)
    try:
        context = _queue_context(after)
    except BadCursor:
        context = _queue_context(None)
    return render(
        request,
        "operations/review_queue.html#queue",
        {**context, "error": error, "error_for": str(operation_id)},
    )
