from __future__ import annotations

import logging
import time

from django.utils.functional import SimpleLazyObject, empty

from core import logs, tracing

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
    """Runs each request in an OpenTelemetry server span of the caller's trace (`traceparent`;
    none or an invalid one starts a new trace), answers with its `traceparent` and
    `X-Request-ID` (the trace id, what support searches by), and writes one access line per
    request. When spans are exported, the Django instrumentation (first in MIDDLEWARE,
    picnic.otel) has started that span from the same header: it is taken as it is. The access
    line has the method, the path without its query string, the status, the duration and the
    user id: never headers, bodies or tokens."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        ids = tracing.current()
        if ids is None:
            with tracing.span(
                request.headers.get(tracing.HEADER), name=request.method, server=True
            ) as ids:
                return self._serve(request, ids)
        return self._serve(request, ids)

    def _serve(self, request, ids: tracing.Ids):
        started = time.perf_counter()
        # Held, not reset on the way out: Django logs "Not Found" and 500s after the middleware
        # chain (and the request's span) returned, and those lines belong to the request too.
        # `request_finished` lets it go.
        logs.hold_request_ids(ids)
        response = self.get_response(request)
        response[tracing.HEADER] = ids.traceparent
        response["X-Request-ID"] = ids.trace_id
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
    """`request_finished`: the request's ids leave its log lines once its response is closed."""
    logs.hold_request_ids(None)


def _user_id(request):
    """The user the request was served for, if anything looked it up: reading it here must not
    load a session (/healthz does no I/O)."""
    user = getattr(request, "user", None)
    if user is None or (isinstance(user, SimpleLazyObject) and user._wrapped is empty):
        return None
    return user.pk if user.is_authenticated else None
