"""The support console: thin views over console.selectors (reads) and console.moves (the
existing staff services of each app)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from urllib.parse import urlencode

from django import forms
from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from console import selectors
from console.moves import MOVES, apply_move, refusal_for
from console.selectors import Filters, Row
from console.summaries import summaries_cached
from core.api import error_json
from core.lifecycle import lifecycles
from core.live import session_grant, staff_stream, stream_response

# Saved views: a view is its query string; these are the ones staff reach for first.
PRESETS = [
    ("Everything", {}),
    ("Unknown DMs", {"kind": "delivery", "status": "unknown"}),
    ("Waiting for review", {"kind": "operation", "status": "needs_review"}),
    ("Actions failed in the last hour", {"kind": "action", "status": "failed"}),
    ("Stuck for over an hour", {"older": "60"}),
]
# The needs-attention list refreshes itself this often (the sse work may push instead).
POLL_SECONDS = 10
# A bulk move acts on at most this many rows (each may call a provider).
BULK_MAX = 100
# A page renders at most this many rows (about 1 ms each on a busy 2-core host); the CSV
# export has all of them.
SHOWN = 100


def _context(request: HttpRequest, **extra) -> dict:
    return {"search_term": request.GET.get("q", ""), "now": timezone.now(), **extra}


@staff_member_required
def home(request: HttpRequest) -> HttpResponse:
    filters = Filters.from_query(request.GET)
    listing = selectors.needs_attention(
        filters, kinds=selectors.viewable_kinds(request.user), shown=SHOWN
    )
    query = urlencode(filters.as_query())
    context = _context(
        request,
        filters=filters,
        listing=listing,
        query=query,
        checked=set(request.GET.getlist("key")),
        shown=SHOWN,
        poll_seconds=POLL_SECONDS,
        presets=[(name, urlencode(values)) for name, values in PRESETS],
        moves=list(MOVES.values()),
        statuses=_statuses(),
    )
    if request.htmx:
        return render(request, "console/home.html#attention", context)
    summaries, context["summaries_at"] = summaries_cached()
    kinds = selectors.viewable_kinds(request.user)
    context["summaries"] = [summary for summary in summaries if summary.name in kinds]
    return render(request, "console/home.html", context)


def _statuses() -> list[tuple[str, list[str]]]:
    return [(lc.name, list(lc.moves)) for lc in lifecycles()]


@staff_member_required
def search(request: HttpRequest) -> HttpResponse:
    term = request.GET.get("q", "").strip()
    kinds = selectors.viewable_kinds(request.user)
    result = selectors.search(term, kinds=kinds, shown=SHOWN) if term else None
    if result and result.count == 1 and not result.cut:
        if result.rows:
            row = result.rows[0]
            return redirect(row.timeline_url or row.admin_url)
        return redirect("admin:operations_quote_change", result.quotes[0].pk)
    return render(
        request,
        "console/search.html",
        _context(request, result=result, shown=SHOWN, moves=list(MOVES.values())),
    )


# --- CSV -----------------------------------------------------------------------------------

CSV_HEADER = ["kind", "id", "status", "why", "owner", "created_at", "last_change", "age_minutes",
              "error", "timeline", "admin"]  # fmt: skip


class _Echo:
    """A file-like whose write returns the line, for csv.writer over a stream."""

    def write(self, value: str) -> str:
        return value


# Lines per chunk of the CSV stream: a chunk per line was a socket write per row.
CSV_CHUNK = 200


def _csv_lines(request: HttpRequest, rows: Iterable[Row]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    now = timezone.now()
    # Every link is a path of ASCII ids on this host: its absolute form is the host's prefix
    # and the path (what build_absolute_uri makes of it, without parsing it twice a row).
    prefix = request.build_absolute_uri("/")[:-1]
    chunk = [writer.writerow(CSV_HEADER)]
    for row in rows:
        chunk.append(
            writer.writerow(
                [
                    row.kind,
                    row.id,
                    row.status,
                    row.why,
                    row.owner,
                    row.created_at.isoformat(timespec="seconds"),
                    row.since.isoformat(timespec="seconds"),
                    int(row.age(now).total_seconds() // 60),
                    row.error,
                    prefix + row.timeline_url if row.timeline_url else "",
                    prefix + row.admin_url,
                ]
            )
        )
        if len(chunk) >= CSV_CHUNK:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)


def _csv_response(request: HttpRequest, rows: Iterable[Row], name: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(_csv_lines(request, rows), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@staff_member_required
def attention_csv(request: HttpRequest) -> StreamingHttpResponse:
    """The needs-attention list with the page's filters (each source bounded by LIMIT)."""
    listing = selectors.needs_attention(
        Filters.from_query(request.GET), kinds=selectors.viewable_kinds(request.user)
    )
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    return _csv_response(request, listing.rows, f"needs-attention-{stamp}.csv")


@staff_member_required
def search_csv(request: HttpRequest) -> StreamingHttpResponse:
    term = request.GET.get("q", "").strip()
    kinds = selectors.viewable_kinds(request.user)
    rows = selectors.search(term, kinds=kinds).rows if term else []
    return _csv_response(request, rows, "search.csv")


# --- Bulk resolution -------------------------------------------------------------------------


class BulkForm(forms.Form):
    move = forms.ChoiceField(choices=[(name, move.label) for name, move in MOVES.items()])
    key = forms.MultipleChoiceField(required=True)
    # CharField refuses NUL characters (history detail is text); required: the audit trail.
    note = forms.CharField(required=False, max_length=1000)
    back = forms.CharField(required=False, max_length=2000)

    def __init__(self, data):
        super().__init__(data)
        self.fields["key"].choices = [(k, k) for k in data.getlist("key")]

    def clean_key(self):
        keys = list(dict.fromkeys(self.cleaned_data["key"]))
        if len(keys) > BULK_MAX:
            raise forms.ValidationError(f"choose at most {BULK_MAX} rows at a time")
        return keys


def _bulk_form(request: HttpRequest):
    form = BulkForm(request.POST)
    if not form.is_valid():
        return form, None
    move = MOVES[form.cleaned_data["move"]]
    if not request.user.has_perm(move.permission):
        raise PermissionDenied(f"{move.label} needs the permission {move.permission}")
    # A move shows and changes the rows of its kind: it needs seeing them too.
    if move.kind not in selectors.viewable_kinds(request.user):
        raise PermissionDenied(f"{move.label} needs the view permission of {move.kind}s")
    return form, move


def _safe_back(value: str) -> str:
    return value if value.startswith("/staff/") else "/staff/"


def _preview(request: HttpRequest, form: BulkForm, move, status: int = 200) -> HttpResponse:
    rows = []
    kinds = selectors.viewable_kinds(request.user)
    for key, entity in selectors.rows_for_keys(form.cleaned_data["key"], kinds):
        kind = key.partition(":")[0]
        rows.append(
            {"key": key, "kind": kind, "entity": entity, "refusal": refusal_for(move, kind, entity)}
        )
    context = _context(
        request,
        form=form,
        move=move,
        rows=rows,
        legal=sum(1 for row in rows if not row["refusal"]),
        back=_safe_back(form.cleaned_data["back"]),
        stage="preview",
    )
    return render(request, "console/bulk.html", context, status=status)


def _invalid(request: HttpRequest, form: BulkForm) -> HttpResponse:
    return render(
        request, "console/bulk.html", _context(request, form=form, stage="invalid"), status=400
    )


@staff_member_required
@require_POST
def bulk_preview(request: HttpRequest) -> HttpResponse:
    """What the move would do to each selected row now; asks for the note."""
    form, move = _bulk_form(request)
    return _invalid(request, form) if move is None else _preview(request, form, move)


@staff_member_required
@require_POST
def bulk_apply(request: HttpRequest) -> HttpResponse:
    """Each row through its app's staff service; a refused row is reported, the rest go on."""
    form, move = _bulk_form(request)
    if move is None:
        return _invalid(request, form)
    note = form.cleaned_data["note"].strip()
    if not note:
        form.add_error("note", "a note is required: say why, for the audit trail")
        return _preview(request, form, move, status=400)
    outcomes = []
    kinds = selectors.viewable_kinds(request.user)
    for key, entity in selectors.rows_for_keys(form.cleaned_data["key"], kinds):
        extra = {"provider_message_id": request.POST.get(f"message_id:{key}", "").strip()}
        outcome = apply_move(
            move=move, key=key, entity=entity, user=request.user, note=note, extra=extra
        )
        url = entity.lifecycle.timeline_url(entity.pk) if entity is not None else None
        outcomes.append((outcome, url))
    return render(
        request,
        "console/bulk.html",
        _context(
            request,
            move=move,
            note=note,
            outcomes=outcomes,
            done=sum(1 for o, _ in outcomes if o.ok),
            back=_safe_back(form.cleaned_data["back"]),
            stage="result",
        ),
    )


# --- The event stream ------------------------------------------------------------------------


def staff_events(request: HttpRequest) -> HttpResponse:
    """`/staff/events` (core/live.py streams it) for the kinds this staff member may view: one
    entity or one lifecycle only with that kind's view permission (else 403), the whole channel
    narrowed to the viewable kinds (it carries ids: nothing of a kind the user may not see)."""
    user = request.user
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return error_json("Staff only", code="permission_denied", status=403)
    kinds = selectors.viewable_kinds(user)
    name = request.GET.get("lifecycle") or None
    if name in {lc.name for lc in lifecycles()} and name not in kinds:
        return error_json(
            f"Viewing {name} needs its view permission", code="permission_denied", status=403
        )
    wanted = {name} if name is not None else kinds

    def still_allowed(
        user,
    ) -> bool:  # re-read while the stream is open: a revoked permission ends it
        return wanted <= set(selectors.viewable_kinds(user))

    if name is not None or request.GET.get("id"):
        # One lifecycle or one entity: core.live checks the rest.
        return staff_stream(request, still_allowed)
    if not kinds:
        return error_json("No kind of work to view", code="permission_denied", status=403)
    return stream_response(
        request,
        matches=lambda event: event.get("lifecycle") in kinds,
        terminal_now=False,
        until_terminal=False,
        grant=session_grant(
            request, lambda user: user.is_active and user.is_staff and still_allowed(user)
        ),
    )
