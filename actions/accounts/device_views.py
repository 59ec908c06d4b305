"""End-user pages for the devices of an account: "add a device" links and their QR code, the
approval of a new device, account changes (signed with one passkey prompt for every chain),
the recovery code and the recovery page. Views stay thin: the work is in
devices.py, owner_changes.py and recovery.py."""

from __future__ import annotations

import segno
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from actions.accounts import recovery
from actions.accounts.devices import (
    DeviceError,
    device_link_create,
    device_link_open,
    pending_passkey,
)
from actions.accounts.models import AccountChange, AccountChangeKind, AccountChangeStatus
from actions.accounts.owner_changes import (
    account_change_cancel_proposed,
    account_change_expire_if_overdue,
    change_options,
    owner_change_propose,
    owner_change_sign,
)
from actions.accounts.pages import CHANGE_KIND_LABELS, CHANGE_STATUS_LABELS, DEVICE_LINK_SESSION_KEY
from actions.accounts.passkeys import PasskeyError
from actions.accounts.preferences import in_users_zone
from actions.accounts.recovery import account_change_refresh
from actions.pages import (
    USER_MESSAGES,
    assertion_step,
    chain_page,
    domain_refusal,
    passkey_refusal,
    refusal,
    unreadable,
)
from core.json_input import BodyRefused, loads
from core.l10n import format_datetime
from core.lifecycle import IllegalTransition
from core.timeline import render_timeline


def json_object(request: HttpRequest) -> dict:
    """The body as a JSON object behind the input limits (anything else is refused)."""
    value = loads(request.body)
    if not isinstance(value, dict):
        raise BodyRefused("JSON parse error: expected an object")
    return value


# A refused device link: what the page on the second device says (nothing changed).
LINK_MESSAGES = {
    "link_unknown": _("This link does not work. Create a new one on your other device."),
    "link_other_user": _(
        "This link was made for another Picnic account. Nothing changed. Sign in with the "
        "account that made the link, or create a new link on your own device."
    ),
    "link_used": _(
        "This link was already used. Each link works once. Create a new one on your other device."
    ),
    "link_expired": _(
        "This link expired: links work for a few minutes only. Create a new one on your "
        "other device."
    ),
    "no_account": _("Register your first passkey before adding another device."),
}


# --- "Add a device" ------------------------------------------------------------------------


@login_required
@chain_page()
def device_link_page(request: HttpRequest) -> HttpResponse:
    """GET: what linking does, and a button. POST: a new one-use link and its QR code."""
    if request.method != "POST":
        return render(request, "actions/device_link.html", {"link": None})
    try:
        link, token = device_link_create(user=request.user)
    except DeviceError as exc:
        messages.error(request, LINK_MESSAGES[exc.code])
        return redirect("passkeys")
    url = request.build_absolute_uri(reverse("device-link-open", args=[token]))
    # segno writes an SVG with no script and no external reference: safe to inline.
    qr_svg = segno.make(url, error="m").svg_inline(scale=5, dark="#1b1b1b")
    return render(
        request,
        "actions/device_link.html",
        {"link": link, "url": url, "qr_svg": mark_safe(qr_svg)},  # noqa: S308 (segno's own SVG)
    )


@login_required
@chain_page()
def device_link_open_view(request: HttpRequest, token: str) -> HttpResponse:
    """On the new device, signed in: claim the link, then register a passkey on this page."""
    try:
        link = device_link_open(user=request.user, token=token)
    except DeviceError as exc:
        status = 403 if exc.code == "link_other_user" else 410
        return render(
            request,
            "actions/device_link_refused.html",
            {"reason": LINK_MESSAGES[exc.code]},
            status=status,
        )
    request.session[DEVICE_LINK_SESSION_KEY] = link.pk
    return render(request, "actions/device_link_opened.html", {"link": link})


@login_required
@require_POST
@chain_page()
def device_approve_start(request: HttpRequest, passkey_id: int) -> HttpResponse:
    """Device 1 approves a pending passkey: the add-owner change is built on every chain, then
    signed on its page with one prompt. A recovery's passkey is refused (409, the error shape):
    the page offers no approval for it, only a request made by hand gets here."""
    try:
        passkey = pending_passkey(user=request.user, passkey_id=passkey_id)
        change = owner_change_propose(
            user=request.user, kind=AccountChangeKind.ADD_OWNER, passkey=passkey
        )
    except PasskeyError as exc:
        if exc.code == "recovery_passkey":
            return passkey_refusal(exc, status=409)
        messages.error(request, USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))
        return redirect("passkeys")
    except DeviceError as exc:
        messages.error(request, USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))
        return redirect("passkeys")
    return redirect("account-change", change_id=change.pk)


# --- Account changes -----------------------------------------------------------------------


def _own_change(request: HttpRequest, change_id) -> AccountChange | None:
    return (
        AccountChange.objects.select_related("passkey", "signer")
        .filter(pk=change_id, user=request.user)
        .first()
    )


@login_required
@chain_page()
def account_change_page(request: HttpRequest, change_id) -> HttpResponse:
    change = _own_change(request, change_id)
    if change is None:
        return render(request, "actions/sign_refused.html", status=403)
    change = account_change_expire_if_overdue(change=change)
    if request.htmx and change.status in (
        AccountChangeStatus.SUBMITTED,
        AccountChangeStatus.WAITING,
    ):
        # Refreshed on read, as the signing page does: the page moves on without waiting for
        # beat (which does the same for changes nobody is looking at).
        change = account_change_refresh(change=change)
    return render_timeline(
        request,
        template="actions/account_change.html",
        version=f"{change.updated_at.isoformat()}|{change.status}",
        is_terminal=change.is_terminal,
        context={
            "change": change,
            "kind_label": CHANGE_KIND_LABELS.get(change.kind, change.kind),
            "status_label": CHANGE_STATUS_LABELS.get(change.status, change.status),
            "device": change.passkey,
            "expiry_minutes": settings.ACCOUNT_CHANGE_EXPIRY_SECONDS // 60,
        },
    )


@login_required
@require_POST
@chain_page(json=True)
def account_change_options(request: HttpRequest, change_id) -> HttpResponse:
    change = _own_change(request, change_id)
    if change is None:
        return refusal("Not your account change", code="permission_denied", status=403)
    change = account_change_expire_if_overdue(change=change)
    if change.status == AccountChangeStatus.EXPIRED:
        return refusal("This change expired", code="change_expired", status=410)
    if change.status != AccountChangeStatus.PROPOSED:
        return refusal(f"This change is {change.status}", code="not_proposed", status=409)
    # Removing a passkey is signed by another one.
    exclude = change.passkey if change.kind == AccountChangeKind.REMOVE_OWNER else None
    return HttpResponse(
        change_options(change=change, exclude=exclude), content_type="application/json"
    )


@login_required
@require_POST
@chain_page(json=True)
def account_change_sign(request: HttpRequest, change_id) -> JsonResponse:
    return assertion_step(
        request,
        owned=_own_change(request, change_id) is not None,
        not_yours="Not your account change",
        sign=lambda credential_json: owner_change_sign(
            change_id=change_id, user=request.user, credential_json=credential_json
        ),
    )


@login_required
@require_POST
@chain_page()
def account_change_cancel(request: HttpRequest, change_id) -> HttpResponse:
    """Leave a proposed change unsigned."""
    if _own_change(request, change_id) is None:
        return render(request, "actions/sign_refused.html", status=403)
    try:
        account_change_cancel_proposed(change_id=change_id, user=request.user)
    except IllegalTransition:
        pass  # it moved on: its page says where it is
    return redirect("account-change", change_id=change_id)


@login_required
@require_POST
@chain_page()
def recovery_cancel_start(request: HttpRequest, change_id) -> HttpResponse:
    """Any owner cancels a recovery in progress: a cancelRecovery op on every chain."""
    target = _own_change(request, change_id)
    if target is None or target.kind != AccountChangeKind.RECOVERY or target.is_terminal:
        messages.error(request, gettext("This recovery is not in progress any more."))
        return redirect("passkeys")
    try:
        change = owner_change_propose(
            user=request.user, kind=AccountChangeKind.CANCEL_RECOVERY, target=target
        )
    except PasskeyError as exc:
        messages.error(request, USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))
        return redirect("passkeys")
    return redirect("account-change", change_id=change.pk)


# --- Recovery code -------------------------------------------------------------------------


@login_required
@chain_page()
def recovery_code_page(request: HttpRequest) -> HttpResponse:
    """GET: what a recovery code is. POST: a new code, shown on this response only, and the
    change that sets its key on chain (signed on the page, one prompt)."""
    if request.method != "POST":
        return render(request, "actions/recovery_code.html", {"code": None})
    try:
        code, change = recovery.recovery_code_create(user=request.user)
    except PasskeyError as exc:
        messages.error(request, USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))
        return redirect("passkeys")
    response = render(
        request,
        "actions/recovery_code.html",
        {"code": code, "change": change, "delay_hours": settings.RECOVERY_DELAY_SECONDS // 3600},
    )
    response["Cache-Control"] = "no-store"  # the code is shown once: never from a cache
    return response


RECOVERY_REFUSED = _(
    "That username and recovery code do not match. Check the code (letters and digits, in "
    "groups) and try again. Nothing changed."
)
RECOVERY_THROTTLED = _("Too many recovery attempts. Nothing changed. Wait an hour, then try again.")
RECOVERY_SESSION_KEY = "recovery_registration"


def recovery_page(request: HttpRequest) -> HttpResponse:
    """Not signed in (or on a new device): the recovery code and a new passkey."""
    return render(
        request,
        "actions/recover.html",
        {"username": request.user.get_username() if request.user.is_authenticated else ""},
    )


@require_POST
@chain_page(json=True)
def recovery_options(request: HttpRequest) -> HttpResponse:
    try:
        body = json_object(request)
    except BodyRefused as exc:
        return unreadable(exc)
    username = str(body.get("username", ""))[:150]
    options, challenge = recovery.recovery_registration_options(username=username)
    request.session[RECOVERY_SESSION_KEY] = {"username": username, "challenge": challenge.hex()}
    return HttpResponse(options, content_type="application/json")


@require_POST
@chain_page(json=True)
def recovery_verify(request: HttpRequest) -> JsonResponse:
    pending = request.session.pop(RECOVERY_SESSION_KEY, None)
    if pending is None:
        return refusal("Start again: no challenge is pending", code="no_challenge", status=400)
    try:
        body = json_object(request)
    except BodyRefused as exc:
        return unreadable(exc)
    try:
        change = recovery.recovery_start(
            username=pending["username"],
            code=str(body.get("code", "")),
            credential=body.get("credential") or {},
            expected_challenge=bytes.fromhex(pending["challenge"]),
            address=request.META.get("REMOTE_ADDR", ""),
            user_agent=request.headers.get("User-Agent", ""),
        )
    except recovery.RecoveryThrottled as exc:
        return domain_refusal(exc, shown=RECOVERY_THROTTLED)
    except recovery.RecoveryRefused as exc:
        return domain_refusal(exc, shown=RECOVERY_REFUSED)
    except PasskeyError as exc:
        return passkey_refusal(exc, status=400)
    with in_users_zone(change.user):  # as their e-mail says it, with the zone's name
        ready = format_datetime(change.ready_at) if change.ready_at else "—"
    return JsonResponse(
        {
            "status": change.status,
            "ready_at": change.ready_at.isoformat() if change.ready_at else None,
            "message": gettext(
                "Recovery started. Your new passkey can sign once the safety delay has passed "
                "(%(ready)s), unless one of your devices cancels it. We sent you an e-mail."
            )
            % {"ready": ready},
        }
    )
