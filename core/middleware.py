from __future__ import annotations

import logging
import time

from django.utils.functional import SimpleLazyObject, empty

from core import tracing

access_log = logging.getLogger("picnic.access")

# Everything is served from our origin (htmx is vendored, no CDN); no inline scripts.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        # The admin ships inline scripts of its own; our pages get the strict policy.
        if not request.path.startswith("/admin/"):
            response.setdefault("Content-Security-Policy", CSP)
        return response


class TraceMiddleware:
    """Runs each request in a span of the caller's W3C trace (`traceparent`; none or an invalid
    one starts a new trace), answers with our `traceparent` and `X-Request-ID` (the trace id,
    what support searches by), and writes one access line per request. The line has the
    method, the path without its query string, the status, the duration and the user id:
    never headers, bodies or tokens."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        # Set, not reset on the way out: Django logs "Not Found" and 500s after the middleware
        # chain returns, and those lines belong to the request too. `request_finished` clears it.
        # With OpenTelemetry on, its Django middleware (first) has started the request's span
        # from the same header: that span is our context, so logs and history name it.
        context = tracing.from_opentelemetry() or tracing.continue_from(
            request.headers.get(tracing.HEADER)
        )
        tracing.activate(context)
        response = self.get_response(request)
        response[tracing.HEADER] = context.traceparent
        response["X-Request-ID"] = context.trace_id
        access_log.info(
            "%s %s %s",
            request.method,
            request.path,
            response.status_code,
            extra={
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "user_id": _user_id(request),
            },
        )
        return response


def end_trace(**_) -> None:
    """`request_finished`: the request's trace ends once its response is closed."""
    tracing.activate(None)


def _user_id(request):
    """The user the request was served for, if anything looked it up: reading it here must not
    load a session (/healthz does no I/O)."""
    user = getattr(request, "user", None)
    if user is None or (isinstance(user, SimpleLazyObject) and user._wrapped is empty):
        return None
    return user.pk if user.is_authenticated else None
