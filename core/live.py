"""Live updates: server-sent events fed by the event channel (core/events.py).

A page opens one stream (htmx's SSE extension: `sse-connect`, `sse-close="end"`) and its
existing partial re-fetches itself on `hx-trigger="sse:changed"`: the stream only says *that*
something changed, rendering stays in the page's own view (and its `?u=` version check).

- `changed`: sent once on every (re)connection, so what happened while the page was not
  connected is picked up, then on every event the stream's filter matches.
- `end`: the entity reached a terminal status (or this server cannot stream, see below); the
  extension closes the source, nothing reconnects.
- a comment every LIVE_HEARTBEAT_SECONDS keeps proxies from closing an idle stream, and the
  stream ends after LIVE_STREAM_SECONDS: the browser reconnects after `retry:` milliseconds
  (bounded lifetime: no connection outlives a deploy for long).
- the grant: the view hands its stream a check of the session it was opened with
  (`session_grant`); the stream runs it before every event it sends and at least every
  STREAM_GRANT_CHECK_SECONDS, and ends with `end` (`reason: signed out`) once it fails: after a
  logout, a password change, a deactivated user, or staff rights withdrawn.

Streaming needs the ASGI entry point (picnic.asgi). Under WSGI (the test live_server) Django
would read the whole endless stream into memory, so the view answers `end` at once and the
page keeps polling.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.sessions.backends.base import SessionBase
from django.core.exceptions import ValidationError
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from core import events
from core.api import error_json
from core.lifecycle import lifecycle_named, lifecycles

logger = logging.getLogger(__name__)

Filter = Callable[[dict[str, Any]], bool]
# Whether the stream's session still holds: run before each event and every so often.
Grant = Callable[[], Awaitable[bool]]
SIGNED_OUT = "signed out"


def _message(name: str, data: dict[str, Any] | None = None) -> str:
    return f"event: {name}\ndata: {json.dumps(data or {}, separators=(',', ':'))}\n\n"


def _is_terminal(event: dict[str, Any]) -> bool:
    try:
        return lifecycle_named(event["lifecycle"]).is_terminal(event["status"])
    except KeyError:
        return False


async def _pump(subscription: events.Subscription, queue: asyncio.Queue) -> None:
    # Its own task: waiting on a queue can time out (heartbeats) without cancelling a read
    # half-way through a Redis reply.
    while True:
        await queue.put(await subscription.receive())


async def event_stream(
    *, matches: Filter, until_terminal: bool, grant: Grant | None = None
) -> AsyncIterator[str]:
    """The body of one stream. Cancelled when the client goes away (Django's ASGI handler
    cancels the response on `http.disconnect`): the subscription is released on the way out."""
    async with events.subscribe() as subscription:
        queue: asyncio.Queue = asyncio.Queue(maxsize=1000)
        reader = asyncio.create_task(_pump(subscription, queue))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.LIVE_STREAM_SECONDS
        next_check = loop.time() + settings.STREAM_GRANT_CHECK_SECONDS
        try:
            yield f"retry: {settings.LIVE_RETRY_MS}\n" + _message("changed", {"connected": True})
            while (remaining := deadline - loop.time()) > 0:
                wait = min(settings.LIVE_HEARTBEAT_SECONDS, remaining, next_check - loop.time())
                try:
                    event = await asyncio.wait_for(queue.get(), max(wait, 0))
                except TimeoutError:
                    if reader.done():  # the channel broke: end, the browser reconnects
                        logger.warning("event subscription ended: %r", reader.exception())
                        return
                    if grant is not None and loop.time() >= next_check:
                        if not await grant():
                            yield _message("end", {"reason": SIGNED_OUT})
                            return
                        next_check = loop.time() + settings.STREAM_GRANT_CHECK_SECONDS
                        continue
                    yield ": keepalive\n\n"
                    continue
                if not matches(event):
                    continue
                if grant is not None:  # nothing goes out once the session is gone
                    if not await grant():
                        yield _message("end", {"reason": SIGNED_OUT})
                        return
                    next_check = loop.time() + settings.STREAM_GRANT_CHECK_SECONDS
                shown = {k: event.get(k) for k in ("lifecycle", "id", "status")}
                yield _message("changed", shown)
                if until_terminal and _is_terminal(event):
                    yield _message("end", shown)
                    return
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


class _ReadOnlySession(dict):
    """Session data as `get_user` reads it, whose writes go nowhere."""

    def flush(self) -> None:
        self.clear()

    def cycle_key(self) -> None:
        pass


def session_grant(request: HttpRequest, allowed: Callable[[Any], bool] | None = None) -> Grant:
    """A check that the session this request came with still signs in the same user (read
    afresh from the session store: a logout deletes it, a password change voids its hash, a
    deactivated user no longer resolves) and that `allowed(user)` still holds (re-read from
    the database, e.g. `is_staff`)."""
    session: SessionBase = request.session
    key = session.session_key
    user_id = request.user.pk
    engine = type(session)

    def check() -> bool:
        if key is None:
            return False
        # get_user reads only `request.session`: the same session loaded afresh, read-only (a
        # failed check must not flush or re-key the browser's session behind its back).
        session = _ReadOnlySession(engine(session_key=key).load())
        user = get_user(SimpleNamespace(session=session))
        if not user.is_authenticated or user.pk != user_id:
            return False
        return allowed is None or bool(allowed(user))

    return sync_to_async(check, thread_sensitive=True)


def _ended(reason: str) -> HttpResponse:
    """One `end` event: the extension closes its source and the page keeps polling."""
    return _sse_response(iter([_message("end", {"reason": reason})]))


def _sse_response(content) -> StreamingHttpResponse:
    response = StreamingHttpResponse(content, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event through at once
    return response


def stream_response(
    request: HttpRequest,
    *,
    matches: Filter,
    terminal_now: bool,
    until_terminal: bool,
    grant: Grant | None = None,
) -> HttpResponse:
    if terminal_now:
        return _ended("terminal")
    if not isinstance(request, ASGIRequest):
        return _ended("not streaming here (WSGI): the page polls")
    return _sse_response(
        event_stream(
            matches=matches,
            until_terminal=until_terminal,
            grant=grant or session_grant(request),
        )
    )


def _is_staff(user) -> bool:
    return user.is_active and user.is_staff


def staff_stream(request: HttpRequest) -> HttpResponse:
    """`/staff/events`: every transition of every lifecycle (the console), or one lifecycle
    (`?lifecycle=operation`), or one entity (`?lifecycle=action&id=<pk>`, ending at its
    terminal status). Staff only."""
    user = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return error_json("Staff only", code="permission_denied", status=403)
    names = {lifecycle.name for lifecycle in lifecycles()}
    name = request.GET.get("lifecycle") or None
    pk = request.GET.get("id") or None
    if name is not None and name not in names:
        return error_json(f"Unknown lifecycle: {name}", code="invalid", status=400)
    if pk is None:
        return stream_response(
            request,
            matches=lambda e: name is None or e.get("lifecycle") == name,
            terminal_now=False,
            until_terminal=False,
            grant=session_grant(request, _is_staff),
        )
    if name is None:
        return error_json("id needs a lifecycle", code="invalid", status=400)
    lifecycle = lifecycle_named(name)
    try:
        row = (
            lifecycle.model._default_manager.filter(pk=pk)
            .values_list("pk", lifecycle.status_field)
            .first()
        )
    except (ValidationError, ValueError, TypeError):  # not a valid pk for this model
        row = None
    if row is None:
        return error_json(f"{name} not found: {pk}", code="not_found", status=404)
    return entity_stream(
        request,
        lifecycle_name=name,
        pk=row[0],
        status=row[1],
        grant=session_grant(request, _is_staff),
    )


def entity_stream(
    request: HttpRequest, *, lifecycle_name: str, pk: Any, status: str, grant: Grant | None = None
) -> HttpResponse:
    """The stream of one entity the caller may see (the view checked), ending at its terminal
    status, or when the session it was opened with ends (`grant`; by default: the same user
    still signed in)."""
    return stream_response(
        request,
        matches=lambda e: e.get("lifecycle") == lifecycle_name and e.get("id") == str(pk),
        terminal_now=lifecycle_named(lifecycle_name).is_terminal(status),
        until_terminal=True,
        grant=grant,
    )
