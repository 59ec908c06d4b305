"""The live timeline pattern shared by every app's staff page.

One template per page with a named `timeline` partial. A full GET renders the page; an htmx
poll renders only the partial, answers 204 when the entity has not changed since the
`u=<updated_at>` the poll carries (nothing to swap), and 286 once the entity is terminal, which
stops htmx polling.

Pages are live (core/live.py): an event stream around the partial triggers the same re-fetch
as soon as a transition commits, and the poll stays as the fallback. `?live=0` renders the page
without the stream (polling only: the baseline of bench/live_updates.py).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.http import HttpResponseStopPolling


def render_timeline(
    request: HttpRequest,
    *,
    template: str,
    version: str,
    is_terminal: bool,
    context: dict[str, Any],
) -> HttpResponse:
    context = {
        **context,
        "version": version,
        "is_terminal": is_terminal,
        "live": request.GET.get("live") != "0",
    }
    if not request.htmx:
        return render(request, template, context)
    if request.GET.get("u") == version and not is_terminal:
        return HttpResponse(status=204)
    response = render(request, f"{template}#timeline", context)
    if is_terminal:
        response.status_code = HttpResponseStopPolling.status_code
    return response
