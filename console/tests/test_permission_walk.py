"""Every staff and admin URL, walked by staff members who each hold one permission (and, for
the moves, a move's permission with the view permission of its kind): what each one gets, page
by page. The routes come from the URL resolver, so a new staff or admin URL fails
`test_every_staff_and_admin_route_is_walked` until it has its expectation here."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from actions.accounts.models import AccountChange
from actions.execution.models import Action
from actions.permissions.models import SpendPermission
from core.lifecycle import lifecycles
from core.permissions import may_view
from messaging.models import Delivery
from operations.models import Operation

DM_TEXT = "the private words of a direct message"

# The console's moves, each with its permission (console/moves.py).
MOVE_PERMISSIONS = {
    "action": "actions.resolve_action",
    "delivery": "messaging.resolve_delivery",
    "operation": "operations.pause_operation",
}
BULK_MOVE = {
    "action": "action:mark_failed",
    "delivery": "delivery:resolve_failed",
    "operation": "operation:pause",
}
KIND_MODEL = {"action": Action, "delivery": Delivery, "operation": Operation}
# Staff routes: each has its walk below (a route here without one fails the coverage test).
STAFF_ROUTES = {
    "staff/",
    "staff/attention.csv",
    "staff/search/",
    "staff/search.csv",
    "staff/bulk/preview/",
    "staff/bulk/apply/",
    "staff/events",
    "staff/actions/<uuid:action_id>/",
    "staff/actions/<uuid:action_id>/mark-failed",
    "staff/actions/<uuid:action_id>/resend",
    "staff/deliveries/<uuid:delivery_id>/",
    "staff/operations/review/",
    "staff/operations/review/<uuid:operation_id>/",
    "staff/operations/<uuid:operation_id>/",
    "staff/account-changes/<uuid:change_id>/",
    "staff/spend-permissions/<uuid:permission_id>/",
}
POST_ROUTES = {
    "staff/bulk/preview/",
    "staff/bulk/apply/",
    "staff/actions/<uuid:action_id>/mark-failed",
    "staff/actions/<uuid:action_id>/resend",
    "staff/operations/review/<uuid:operation_id>/",
}
# The admin's own routes that are not a model's (walked in `_admin_site_walk`).
ADMIN_SITE_ROUTES = {
    "admin/",
    "admin/login/",
    "admin/logout/",
    "admin/password_change/",
    "admin/password_change/done/",
    "admin/autocomplete/",
    "admin/jsi18n/",
    "admin/r/<path:content_type_id>/<path:object_id>/",
    "admin/timezone/",
    "admin/(?P<url>.*)$",
    "admin/actions/action/resolve/<slug:kind>/",
    "admin/messaging/delivery/<uuid:delivery_id>/resolve/",
}


def _routes(resolver: URLResolver, prefix: str = "") -> Iterator[str]:
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern)


def _model_routes(model) -> dict[str, str]:
    base = f"admin/{model._meta.app_label}/{model._meta.model_name}/"
    extra = {"password": base + "<id>/password/"} if model is User else {}
    return {
        **extra,
        "changelist": base,
        "add": base + "add/",
        "history": base + "<path:object_id>/history/",
        "delete": base + "<path:object_id>/delete/",
        "change": base + "<path:object_id>/change/",
        "redirect": base + "<path:object_id>/",
    }


def test_every_staff_and_admin_route_is_walked():
    found = {r for r in _routes(get_resolver()) if r.startswith(("staff/", "admin/"))}
    app_index = {r for r in found if "(?P<app_label>" in r}
    assert len(app_index) == 1
    walked = STAFF_ROUTES | ADMIN_SITE_ROUTES | app_index
    for model in admin.site._registry:
        walked |= set(_model_routes(model).values())
    assert found == walked, {"not walked": found - walked, "gone": walked - found}


# --- The walkers -------------------------------------------------------------------------------


@dataclass
class World:
    stuck_action: Action
    failed_action: Action
    delivery: Delivery
    operation: Operation


@pytest.fixture
def world(stuck_action, failed_action, make_delivery, review_operation) -> World:
    delivery = make_delivery("claimed", "sending", "unknown", text=DM_TEXT)
    return World(stuck_action, failed_action, delivery, review_operation)


def _permissions() -> list[Permission]:
    """Every permission of every model the admin shows (custom ones included)."""
    types = ContentType.objects.get_for_models(*admin.site._registry).values()
    return list(Permission.objects.filter(content_type__in=types).select_related("content_type"))


def _label(permission: Permission) -> str:
    return f"{permission.content_type.app_label}.{permission.codename}"


def _staff_with(make_user, name: str, permissions: list[Permission]):
    member = make_user(name, is_staff=True)
    member.user_permissions.add(*permissions)
    return type(member).objects.get(pk=member.pk)  # no permission cache


class Walk:
    """One client, one user at a time; every mismatch is collected, the test lists them all."""

    def __init__(self):
        self.client = Client()
        self.wrong: list[str] = []

    def login(self, user) -> None:
        self.client.force_login(user)
        self.who = ",".join(sorted(user.get_all_permissions())) or "no permission"

    def check(self, method: str, url: str, status: int, *, shows=(), hides=(), data=None):
        response = getattr(self.client, method)(url, data or {})
        if response.status_code != status:
            self.wrong.append(
                f"{self.who}: {method.upper()} {url} {response.status_code} != {status}"
            )
            return
        if shows or hides:
            body = (
                b"".join(response.streaming_content) if response.streaming else response.content
            ).decode()
            for text in shows:
                if text not in body:
                    self.wrong.append(f"{self.who}: {url} does not show {text}")
            for text in hides:
                if text in body:
                    self.wrong.append(f"{self.who}: {url} shows {text}")


def _staff_walk(walk: Walk, user, world: World) -> None:
    kinds = {kind for kind, model in KIND_MODEL.items() if may_view(user, model)}
    ids = {
        "action": str(world.stuck_action.pk),
        "delivery": str(world.delivery.pk),
        "operation": str(world.operation.pk),
    }
    seen = [ids[k] for k in sorted(kinds)]
    unseen = [ids[k] for k in sorted(set(ids) - kinds)] + ([DM_TEXT] * ("delivery" not in kinds))

    # Lists: rows of the kinds the user may view, none of the others.
    charts = [f'id="kind-{k}"' for k in sorted(kinds)]
    no_charts = [f'id="kind-{k}"' for k in sorted(set(ids) - kinds)]
    walk.check("get", "/staff/", 200, shows=seen + charts, hides=unseen + no_charts)
    walk.check("get", "/staff/attention.csv", 200, shows=seen, hides=unseen)
    timelines = {
        "action": f"/staff/actions/{ids['action']}/",
        "delivery": f"/staff/deliveries/{ids['delivery']}/",
        "operation": f"/staff/operations/{ids['operation']}/",
    }
    for kind, pk in ids.items():
        # the term stays in the search box; what is found links to its timeline
        found = {"hides": [timelines[kind]]} if kind not in kinds else {}
        walk.check("get", f"/staff/search/?q={pk}", 302 if kind in kinds else 200, **found)
        walk.check(
            "get", f"/staff/search.csv?q={pk}", 200, **{"shows" if kind in kinds else "hides": [pk]}
        )
    # The event stream: the viewable kinds only (under WSGI it ends at once; test_live_walk
    # below streams for real).
    any_kind = any(may_view(user, lifecycle.model) for lifecycle in lifecycles())
    walk.check("get", "/staff/events", 200 if any_kind else 403)
    for kind, pk in ids.items():
        walk.check("get", f"/staff/events?lifecycle={kind}", 200 if kind in kinds else 403)
        expected = 200 if kind in kinds else 403
        walk.check("get", f"/staff/events?lifecycle={kind}&id={pk}", expected)

    # Timelines and the review queue: the whole page, or 403 and nothing of it.
    for kind, url in (
        ("action", f"/staff/actions/{ids['action']}/"),
        ("delivery", f"/staff/deliveries/{ids['delivery']}/"),
        ("operation", f"/staff/operations/{ids['operation']}/"),
        ("operation", "/staff/operations/review/"),
    ):
        if kind in kinds:
            shown = [ids[kind]] + ([DM_TEXT] if kind == "delivery" else [])
            walk.check("get", url, 200, shows=shown)
        else:
            walk.check("get", url, 403, hides=[ids[kind], DM_TEXT])

    # An account change's timeline: the permission first, then the lookup (none exists here).
    walk.check(
        "get",
        f"/staff/account-changes/{uuid.uuid4()}/",
        404 if may_view(user, AccountChange) else 403,
    )
    walk.check(
        "get",
        f"/staff/spend-permissions/{uuid.uuid4()}/",
        404 if may_view(user, SpendPermission) else 403,
    )

    # Moves: the move's permission and the view permission of its kind. The moves are made so
    # that nothing changes: an empty note (refused by the service), a terminal action.
    failed = world.failed_action.pk
    may = {kind: kind in kinds and user.has_perm(MOVE_PERMISSIONS[kind]) for kind in KIND_MODEL}
    for verb in ("mark-failed", "resend"):
        walk.check("post", f"/staff/actions/{failed}/{verb}", 302 if may["action"] else 403)
    may_review = "operation" in kinds and user.has_perm("operations.review_operation")
    walk.check(
        "post",
        f"/staff/operations/review/{ids['operation']}/",
        302 if may_review else 403,
        data={"decision": "neither"},
    )
    for kind, move in BULK_MOVE.items():
        keys = [f"{k}:{pk}" for k, pk in ids.items()]
        data = {"move": move, "key": keys}
        # Rows of the kinds the user may not view are "not found": their key, nothing else.
        found = {}
        if may[kind]:
            found = {
                "shows": [f'title="{ids[k]}"' for k in ids if k in kinds],
                "hides": [f'title="{ids[k]}"' for k in ids if k not in kinds],
            }
        walk.check("post", "/staff/bulk/preview/", 200 if may[kind] else 403, data=data, **found)
        walk.check("post", "/staff/bulk/apply/", 400 if may[kind] else 403, data=data)


def _admin_model_walk(walk: Walk, user, model, obj) -> None:
    """One model's admin: the list, change and history pages with its view or change
    permission; add and delete as the admin declares them (several refuse both to everyone:
    work is never added or deleted by hand, tokens are revoked, not deleted)."""
    model_admin = admin.site._registry[model]
    meta = model._meta
    uuid_pk = meta.pk.get_internal_type() == "UUIDField"
    pk = obj.pk if obj is not None else (uuid.uuid4() if uuid_pk else 987654321)
    base = f"/admin/{meta.app_label}/{meta.model_name}/"
    view = may_view(user, model)
    request = _Request(user)
    add = model_admin.has_add_permission(request)
    if model is User:  # Django's user admin adds with the change permission too
        add = add and model_admin.has_change_permission(request)
    delete = model_admin.has_delete_permission(request, obj)
    walk.check("get", base, 200 if view else 403)
    walk.check("get", base + "add/", 200 if add else 403)
    if obj is None:  # permission first, then "does not exist" (a redirect)
        walk.check("get", f"{base}{pk}/change/", 302 if view else 403)
        walk.check("get", f"{base}{pk}/delete/", 302 if delete else 403)
        walk.check("get", f"{base}{pk}/history/", 302)  # Django looks the row up first
    else:
        walk.check("get", f"{base}{pk}/change/", 200 if view else 403)
        walk.check("get", f"{base}{pk}/delete/", 200 if delete else 403)
        walk.check("get", f"{base}{pk}/history/", 200 if view else 403)
    walk.check("get", f"{base}{pk}/", 302)  # to the change page, which checks
    if model is User:  # another user's password: the change permission
        may_change = model_admin.has_change_permission(request)
        walk.check("get", f"{base}{pk}/password/", 200 if may_change else 403)


def _admin_site_walk(walk: Walk, user, world: World, owned: set) -> None:
    # The index lists exactly the models the user may view.
    shows, hides = [], []
    apps = set()
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        link = f'href="/admin/{meta.app_label}/{meta.model_name}/"'
        (shows if may_view(user, model) else hides).append(link)
        if any(model_admin.get_model_perms(_Request(user)).values()):
            apps.add(meta.app_label)
    walk.check("get", "/admin/", 200, shows=shows, hides=hides)
    # The index of the apps of the user's permissions (all of them for no permission).
    for app_label in {m._meta.app_label for m in owned or admin.site._registry}:
        walk.check("get", f"/admin/{app_label}/", 200 if app_label in apps else 404)
    # The intermediate pages of the admin's resolutions: the move's and the view permission.
    may_resolve_actions = may_view(user, Action) and user.has_perm("actions.resolve_action")
    walk.check(
        "get",
        f"/admin/actions/action/resolve/mark-failed/?ids={world.stuck_action.pk}",
        200 if may_resolve_actions else 403,
    )
    may_resolve_delivery = may_view(user, Delivery) and user.has_perm("messaging.resolve_delivery")
    walk.check(
        "get",
        f"/admin/messaging/delivery/{world.delivery.pk}/resolve/",
        200 if may_resolve_delivery else 403,
        **{"shows" if may_resolve_delivery else "hides": [str(world.delivery.pk)]},
    )


def _admin_misc_walk(walk: Walk, user, world: World) -> None:
    walk.check("get", "/admin/timezone/", 200)
    walk.check("get", "/admin/jsi18n/", 200)
    walk.check("get", "/admin/password_change/", 200)
    walk.check("get", "/admin/password_change/done/", 200)
    walk.check("get", "/admin/login/", 302)  # signed in: to the index
    walk.check("get", "/admin/autocomplete/", 403)  # no field to complete
    walk.check("get", "/admin/no-such-page/", 404)
    action_type = ContentType.objects.get_for_model(Action).pk
    walk.check("get", f"/admin/r/{action_type}/{world.stuck_action.pk}/", 404)  # no site URL


class _Request:
    """What ModelAdmin.get_model_perms reads of a request."""

    def __init__(self, user):
        self.user = user


def _users(make_user) -> Iterator:
    permissions = _permissions()
    yield _staff_with(make_user, "none", [])
    for n, permission in enumerate(permissions):
        yield _staff_with(make_user, f"p{n}", [permission])
    # A move needs two: its own and the view permission of its kind.
    for n, (kind, move_permission) in enumerate(
        [*MOVE_PERMISSIONS.items(), ("operation", "operations.review_operation")]
    ):
        model = KIND_MODEL[kind]
        pair = [
            p
            for p in permissions
            if _label(p)
            in (move_permission, f"{model._meta.app_label}.view_{model._meta.model_name}")
        ]
        assert len(pair) == 2
        yield _staff_with(make_user, f"pair{n}", pair)


def test_each_permission_opens_exactly_its_staff_pages(make_user, world, settings):
    settings.CONSOLE_SUMMARY_CACHE_SECONDS = 600  # the charts once, not on every home
    walk = Walk()
    count = 0
    for user in _users(make_user):
        walk.login(user)
        _staff_walk(walk, user, world)
        count += 1
    assert count > 100  # every permission of every model the admin shows
    assert not walk.wrong, "\n".join(walk.wrong)


def test_each_permission_opens_exactly_its_admin_pages(make_user, world, make_token):
    """Every single-permission holder: the index (exactly the models it may view), its app's
    index and the other apps' (404), its own model's pages and the resolution pages. The member
    with no permission walks every model's pages: any other model's permission opens nothing
    more there (the admin checks the model's own)."""
    make_token(world.stuck_action.user, world.stuck_action.application)
    objects = {model: model._default_manager.first() for model in admin.site._registry}
    walk = Walk()
    for user in _users(make_user):
        walk.login(user)
        owned = {
            model
            for model in admin.site._registry
            if any(
                p.startswith(f"{model._meta.app_label}.")
                and p.endswith(f"_{model._meta.model_name}")
                for p in user.get_all_permissions()
            )
        }
        _admin_site_walk(walk, user, world, owned)
        if not owned:
            _admin_misc_walk(walk, user, world)
        for model in owned or admin.site._registry:
            _admin_model_walk(walk, user, model, objects[model])
    assert not walk.wrong, "\n".join(walk.wrong[:200])


def test_a_non_staff_user_with_every_permission_gets_no_staff_page(make_user, world):
    member = _staff_with(make_user, "outsider", _permissions())
    member.is_staff = False
    member.save(update_fields=["is_staff"])
    walk = Walk()
    walk.login(member)
    for route in sorted(STAFF_ROUTES - {"staff/events"}):
        url = "/" + route.replace("<uuid:action_id>", str(world.stuck_action.pk))
        url = url.replace("<uuid:delivery_id>", str(world.delivery.pk))
        url = url.replace("<uuid:operation_id>", str(world.operation.pk))
        url = url.replace("<uuid:change_id>", str(uuid.uuid4()))
        url = url.replace("<uuid:permission_id>", str(uuid.uuid4()))
        response = (walk.client.post if route in POST_ROUTES else walk.client.get)(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url
    assert walk.client.get("/staff/events").status_code == 403
