"""Admin pieces shared by every app's back-office. What is per kind of work (its history model,
its live timeline) comes from the lifecycle registry (`core.lifecycle`), not from each app."""

from __future__ import annotations

import json
import re
import uuid
from functools import cache, cached_property
from urllib.parse import parse_qsl, urlencode

from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.utils.html import format_html
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from eth_utils import to_checksum_address

from core.lifecycle import Lifecycle, lifecycle_named, lifecycles

# --- Cells readable at 1280 px ----------------------------------------------------------------

# A list cell shows this much of an error; the whole text is on hover and on the change page.
ERROR_CELL_CHARS = 80


def text_cell(text: str | None, limit: int = ERROR_CELL_CHARS) -> str:
    """A long text (an error, a failure reason) in a list: shortened, the full text on hover."""
    if not text:
        return ""
    return format_html(
        '<span class="picnic-clip" title="{}">{}</span>', text, Truncator(text).chars(limit)
    )


def id_cell(value) -> str:
    """A UUID in a list: its first 8 hex digits in monospace (like a short git hash), the full
    id on hover; the change page and the search take the full one."""
    if value is None:
        return ""
    full = str(value)
    return format_html('<code class="picnic-id" title="{}">{}…</code>', full, full[:8])


def address_cell(value: str | None) -> str:
    """A 0x address or hash in a list: 0x1234…abcd in monospace, the full value on hover."""
    if not value:
        return ""
    if len(value) <= 14:
        return format_html('<code class="picnic-id">{}</code>', value)
    return format_html(
        '<code class="picnic-id" title="{}">{}…{}</code>', value, value[:6], value[-4:]
    )


class ReadOnlyAdminMixin:
    """Staff look, nothing is added, changed or deleted by hand (a ModelAdmin's or an
    inline's permissions: the inline's take the parent `obj`)."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ExactSearchMixin:
    """A ModelAdmin's search as exact lookups on indexes, by the term's shape
    (`search_term_kind`): a blank term finds every row, a term of no shape none, any other
    what `search_exact` finds (never a LIKE nor a cast: a million rows stay fast)."""

    def get_search_results(self, request, queryset, search_term):
        if not search_term.strip():
            return queryset, False
        kind, value = search_term_kind(search_term)
        if kind == "none":
            return queryset.none(), False
        return self.search_exact(queryset, kind, value, search_term.strip()), False

    def search_exact(self, queryset, kind: str, value, term: str):
        """The rows whose indexed columns equal the term: `value` is its normal form for its
        shape `kind` (a UUID, a lowercase hash, an address), `term` as typed, stripped."""
        return queryset.filter(pk=value) if kind == "uuid" else queryset.none()


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    extra = 0
    can_delete = False


# The change page shows this many of the latest history rows; the live timeline has them all.
HISTORY_INLINE_LIMIT = 50


class StatusHistoryInline(ReadOnlyInline):
    """The append-only status history (core.models.StatusHistory), raw payloads included:
    the latest HISTORY_INLINE_LIMIT rows (an entity re-sent for days can have thousands)."""

    fields = (
        "timestamp",
        "from_status",
        "status",
        "detail",
        "actor_kind",
        "actor_user",
        "trace_id",  # the request id (X-Request-ID) to search the logs by
        "payload",
    )
    readonly_fields = fields
    ordering = ("timestamp", "id")
    verbose_name_plural = (
        f"status history (latest {HISTORY_INLINE_LIMIT}; all in the live timeline)"
    )

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("actor_user")


@cache
def _history_inline(name: str) -> type[StatusHistoryInline]:
    model = lifecycle_named(name).history_model
    return type(f"{model.__name__}Inline", (StatusHistoryInline,), {"model": model})


def history_inline(lifecycle: Lifecycle) -> type[StatusHistoryInline]:
    """The history inline of a registered lifecycle's entity (one class per lifecycle)."""
    return _history_inline(lifecycle.name)


class EstimatedCountMixin:
    """A changelist that never counts a whole large table: no "N total" next to the search
    and a paginator that estimates past COUNT_CAP rows (EstimatedCountPaginator). For every
    list that grows with use: history, transfers, ledger, tokens."""

    show_full_result_count = False

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        return EstimatedCountPaginator(queryset, per_page, orphans, allow_empty_first_page)


class FilteredRowLinks(ChangeList):
    """A filtered list's row links with the filters to come back to, the query made once: for
    each row Django's add_preserved_filters resolved the row's URL against every pattern only
    to learn it is not the list's own (a sixth of a filtered 50-row page). The query it adds
    to a change page's URL is the same for every row; add_preserved_filters, given none,
    keeps the row URL's own query as it is."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.row_query = urlencode(dict(parse_qsl(self.preserved_filters)))
        self.preserved_filters = ""

    def url_for_result(self, result) -> str:
        url = super().url_for_result(result)
        return f"{url}?{self.row_query}" if self.row_query else url


class FastListRows:
    """A changelist's rows without a template render or a URL resolution per row: the
    checkbox in Django's markup (the widget's render was a third to a half of a 100-row page)
    and the row links' filters made once (FilteredRowLinks). PicnicAdminSite gives it to every
    registered admin."""

    def get_changelist(self, request, **kwargs):
        return FilteredRowLinks

    def action_checkbox(self, obj):
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            ACTION_CHECKBOX_NAME,
            obj.pk,
            _("Select this object for an action - {}").format(obj),
        )


class LifecycleAdmin(
    FastListRows,
    EstimatedCountMixin,
    ExactSearchMixin,
    ReadOnlyAdminMixin,
    admin.ModelAdmin,
):
    """The admin of an entity with a lifecycle: read-only (its status changes only through
    transitions, i.e. admin actions calling services; it is created by its API, never by hand;
    never deleted either: work ends by a transition that leaves a history row with the staff
    user, which a delete would erase with it, and retention purges terminal actions by a task),
    its history inline last, and a link to its live timeline."""

    lifecycle: Lifecycle

    # Rendering a row costs ~1 ms on a busy 2-core host (the SQL of a page, ~1 ms in all):
    # 50 rows keep a page under 150 ms; staff filter or search rather than page through 1M.
    list_per_page = 50

    def get_inlines(self, request, obj):
        return [*super().get_inlines(request, obj), history_inline(self.lifecycle)]

    def get_formset_kwargs(self, request, obj, inline, prefix):
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        if isinstance(inline, StatusHistoryInline) and obj is not None and obj.pk is not None:
            fk = self.lifecycle.history_fk
            latest = (
                inline.model._default_manager.filter(**{fk: obj.pk})
                .order_by("-timestamp", "-id")
                .values("pk")[:HISTORY_INLINE_LIMIT]
            )
            kwargs["queryset"] = kwargs["queryset"].filter(pk__in=latest)
        return kwargs

    @admin.display(description="id")
    def short_id(self, obj) -> str:
        return id_cell(obj.pk)

    def timeline_link(self, obj, text: str = "live timeline") -> str:
        return format_html('<a href="{}">{}</a>', self.lifecycle.timeline_url(obj.pk), text)


def tracked_work(user) -> list[dict]:
    """Every registered kind of work the user may view, with its admin list and how many are
    not finished: the admin index shows them above the apps."""
    rows = []
    for lifecycle in lifecycles():
        meta = lifecycle.model._meta
        if not user.has_perm(f"{meta.app_label}.view_{meta.model_name}"):
            continue
        # The open statuses by name (an IN on the status index), not NOT IN the terminal ones
        # (a scan of every finished row); counted up to COUNT_CAP.
        field = meta.get_field(lifecycle.status_field)
        open_statuses = [value for value, _ in field.choices if value not in lifecycle.terminal]
        unfinished = lifecycle.model._default_manager.filter(
            **{f"{lifecycle.status_field}__in": open_statuses}
        )
        # No ORDER BY (the model's ordering would sort every open row before the cap) and
        # only the status read: an index-only scan that stops at the cap.
        count = unfinished.order_by().values(lifecycle.status_field)[: COUNT_CAP + 1].count()
        rows.append(
            {
                "name": lifecycle.name,
                "label": meta.verbose_name_plural,
                "url": lifecycle.admin_url(),
                "unfinished": count if count <= COUNT_CAP else f"more than {COUNT_CAP:,}",
            }
        )
    return rows


# --- Counting at scale ---------------------------------------------------------------------

# On PostgreSQL a changelist counts at most this many rows exactly; past it the page says
# "about N" (the planner's estimate) instead of counting millions of rows on every load.
# Counting 10,001 rows of a filter that no index serves took 20–45 ms at 1M rows; 1,001, 2–5.
COUNT_CAP = 1_000
# An estimated list offers this many pages (OFFSET up to MAX_PAGES × per page rows).
MAX_PAGES = 50


class EstimatedCountPaginator(Paginator):
    """A paginator whose count never scans a large table on PostgreSQL: an unfiltered list
    takes the table's size from pg_class.reltuples, a filtered one is counted up to COUNT_CAP
    rows and, past it, takes the planner's row estimate (EXPLAIN). `count_label` says which:
    "1,234", "about 1,000,000", "more than 10,000". Elsewhere (SQLite) it counts exactly."""

    count_kind = "exact"  # "exact", "about" or "more than"

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet) or queryset.query.is_sliced:
            return super().count
        connection = connections[queryset.db]
        if connection.vendor != "postgresql":
            return queryset.count()
        queryset = queryset.order_by()
        if not queryset.query.where:
            estimate = _table_estimate(connection, queryset.model._meta.db_table)
            if estimate > COUNT_CAP:
                self.count_kind = "about"
                return estimate
        counted = queryset.values("pk")[: COUNT_CAP + 1].count()
        if counted <= COUNT_CAP:
            return counted
        estimate = _plan_estimate(connection, queryset)
        if estimate > COUNT_CAP:
            self.count_kind = "about"
            return estimate
        self.count_kind = "more than"
        return COUNT_CAP + 1

    @cached_property
    def num_pages(self) -> int:
        pages = super().num_pages  # counts first, which sets count_kind
        if self.count_kind == "exact":
            return pages
        # Past this, OFFSET walks every earlier row (a second at 1M): filter or search instead.
        return min(pages, MAX_PAGES)

    @property
    def count_label(self) -> str:
        if self.count_kind == "more than":
            return f"more than {COUNT_CAP:,}"
        prefix = "about " if self.count_kind == "about" else ""
        return f"{prefix}{self.count:,}"


def _table_estimate(connection, table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] > 0 else -1  # -1: never analysed


def _plan_estimate(connection, queryset: QuerySet) -> int:
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):  # psycopg returns json as text under some adapters
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


# --- Searching by id ---------------------------------------------------------------------

_HASH = re.compile(r"0x[0-9a-f]{64}")
_ADDRESS = re.compile(r"0x[0-9a-f]{40}")


def search_term_kind(term: str) -> tuple[str, object]:
    """What a pasted search term is, so an admin can look it up by exact match on an index:
    ("uuid", UUID), ("hash", lowercase 0x…64 hex), ("address", lowercase 0x…40 hex) or
    ("text", the stripped term), or ("none", None) for a term no stored id can equal (a NUL:
    PostgreSQL text cannot even hold one, and comparing with it would fail the query)."""
    term = term.strip()
    if "\x00" in term:
        return "none", None
    try:
        return "uuid", uuid.UUID(term)
    except ValueError:
        pass
    lowered = term.lower()
    if _HASH.fullmatch(lowered):
        return "hash", lowered
    if _ADDRESS.fullmatch(lowered):
        return "address", lowered
    return "text", term


def address_forms(address: str) -> list[str]:
    """The spellings an address may be stored in (lowercase, EIP-55 checksummed): an IN over
    them uses the column's index, where UPPER(column) = UPPER(term) scans the table."""

    return sorted({address.lower(), to_checksum_address(address)})


def user_ids_matching(term: str, limit: int = 20) -> list[int]:
    """Users whose username is the term (unique index) or whose e-mail is it, ignoring case
    (auth_user is orders of magnitude smaller than the work tables, so no index of ours)."""
    if "\x00" in term:  # no username or e-mail holds one (see search_term_kind)
        return []
    match = Q(username=term)
    if "@" in term:
        match |= Q(email__iexact=term)
    users = get_user_model()._default_manager.filter(match)
    return list(users.values_list("pk", flat=True)[:limit])
