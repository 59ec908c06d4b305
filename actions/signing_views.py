"""End-user pages: passkey registration and the signing page (session login, owner only)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from actions.models import Action
from actions.passkeys import (
    PasskeyError,
    action_reject,
    action_sign,
    authentication_options,
    passkey_register,
    registration_options,
)
from actions.services import action_expire_if_overdue, action_status_refresh
from picnic.timeline import render_timeline

REGISTRATION_SESSION_KEY = "passkey_registration_challenge"


def _account_address(qx: bytes, qy: bytes) -> tuple[str, str]:
    from actions.tools import web3
    from chain.passkey_account import PasskeyAccountClient

    client = PasskeyAccountClient(web3(), qx, qy, version=settings.ENTRY_POINT_VERSION)
    return client.address, client.factory.address


@login_required
def passkeys_page(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "actions/passkeys.html",
        {
            "passkeys": request.user.passkeys.all(),
            "accounts": request.user.smart_accounts.all(),
        },
    )


@login_required
@require_POST
def passkey_register_options(request: HttpRequest) -> HttpResponse:
    options, challenge = registration_options(user=request.user)
    request.session[REGISTRATION_SESSION_KEY] = challenge.hex()
    return HttpResponse(options, content_type="application/json")


@login_required
@require_POST
def passkey_register_verify(request: HttpRequest) -> JsonResponse:
    challenge = request.session.pop(REGISTRATION_SESSION_KEY, None)
    if challenge is None:
        return JsonResponse(
            {"error": "Start the registration again: no challenge is pending"}, status=400
        )
    try:
        passkey = passkey_register(
            user=request.user,
            credential_json=request.body.decode(),
            expected_challenge=bytes.fromhex(challenge),
            account_address=_account_address,
        )
    except PasskeyError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    account = request.user.smart_accounts.filter(passkey=passkey).first()
    return JsonResponse(
        {"credential_id": passkey.credential_id, "smart_account": account and account.address}
    )


def _own_action(request: HttpRequest, action_id) -> Action | None:
    """The action if it is the logged-in user's; None tells nothing about whether it exists."""
    return Action.objects.filter(pk=action_id, user=request.user).first()


def _refused(request: HttpRequest) -> HttpResponse:
    return render(request, "actions/sign_refused.html", status=403)


@login_required
def sign_page(request: HttpRequest, action_id) -> HttpResponse:
    action = _own_action(request, action_id)
    if action is None:
        return _refused(request)
    action = action_expire_if_overdue(action=action)
    if request.htmx or request.GET.get("u"):
        action = action_status_refresh(action=action)
        action.refresh_from_db()
    slippage = action.params.get("slippage")
    return render_timeline(
        request,
        template="actions/sign.html",
        version=action.updated_at.isoformat(),
        is_terminal=action.is_terminal,
        context={
            "action": action,
            "seconds_left": max(int((action.expires_at - timezone.now()).total_seconds()), 0),
            "slippage_warning": slippage is not None and float(slippage) >= 1,
            "history": action.history.all(),
        },
    )


@login_required
@require_POST
def sign_options(request: HttpRequest, action_id) -> HttpResponse:
    action = _own_action(request, action_id)
    if action is None:
        return JsonResponse({"error": "This signing link is not for your account"}, status=403)
    try:
        return HttpResponse(authentication_options(action=action), content_type="application/json")
    except PasskeyError as exc:
        return JsonResponse({"error": str(exc)}, status=400)


@login_required
@require_POST
def sign_approve(request: HttpRequest, action_id) -> JsonResponse:
    if _own_action(request, action_id) is None:
        return JsonResponse({"error": "This signing link is not for your account"}, status=403)
    try:
        action = action_sign(
            action_id=action_id, user=request.user, credential_json=request.body.decode()
        )
    except PasskeyError as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"status": action.status})


@login_required
@require_POST
def sign_reject(request: HttpRequest, action_id) -> HttpResponse:
    if _own_action(request, action_id) is None:
        return _refused(request)
    try:
        action_reject(action_id=action_id, user=request.user)
    except PasskeyError as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    return JsonResponse({"status": "rejected"})
