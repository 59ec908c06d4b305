"""End-user pages: passkey registration and the signing page (session login, owner only)."""

from __future__ import annotations

import hashlib
import re

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_POST

from actions.models import Action, ActionStatus, ActionType
from actions.services.lifecycle import action_expire_if_overdue, action_status_refresh
from actions.services.passkeys import PasskeyError, passkey_register, registration_options
from actions.services.signing import action_reject, action_sign, authentication_options
from picnic.api import error_json
from picnic.json_input import BodyRefused, json_body
from picnic.live import entity_stream
from picnic.timeline import render_timeline

REGISTRATION_SESSION_KEY = "passkey_registration_challenge"


NOT_YOURS = "This signing link is not for your account"


def _refusal(detail: str, *, code: str, status: int) -> JsonResponse:
    """The API's error body; `error` repeats the detail for the page's script (passkeys.js)."""
    return error_json(detail, code=code, status=status, error=detail)


def _unreadable(exc: BodyRefused) -> JsonResponse:
    """Too large, not UTF-8 or nested too deep: refused before any JSON decoder reads it."""
    return _refusal(str(exc.detail), code=exc.detail.code, status=exc.status_code)


def _account_address(qx: bytes, qy: bytes) -> tuple[str, str]:
    from actions.services.proposals import web3
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
        return _refusal(
            "Start the registration again: no challenge is pending",
            code="no_challenge",
            status=400,
        )
    try:
        credential_json = json_body(request)
    except BodyRefused as exc:
        return _unreadable(exc)
    try:
        passkey = passkey_register(
            user=request.user,
            credential_json=credential_json,
            expected_challenge=bytes.fromhex(challenge),
            account_address=_account_address,
        )
    except PasskeyError as exc:
        return _refusal(str(exc), code="passkey_refused", status=400)
    account = request.user.smart_accounts.filter(passkey=passkey).first()
    return JsonResponse(
        {"credential_id": passkey.credential_id, "smart_account": account and account.address}
    )


def _own_action(request: HttpRequest, action_id) -> Action | None:
    """The action if it is the logged-in user's; None tells nothing about whether it exists."""
    return Action.objects.filter(pk=action_id, user=request.user).first()


def _refused(request: HttpRequest) -> HttpResponse:
    return render(request, "actions/sign_refused.html", status=403)


def _time_left_text(seconds: int) -> str:
    """Time left in words ("14 min 5 s", "42 s", "1 h 3 min"), as passkeys.js counts down."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


# What the user is told, status by status (the raw status stays in `data-status`).
STATUS_LABELS = {
    ActionStatus.PROPOSED: "Waiting for your approval",
    ActionStatus.SIGNED: "Signed",
    ActionStatus.SUBMITTED: "Signed, sending",
    ActionStatus.BROADCAST: "Sent, waiting for the network",
    ActionStatus.EXECUTED: "Done",
    ActionStatus.FAILED: "Not completed",
    ActionStatus.EXPIRED: "Expired",
    ActionStatus.REJECTED: "Rejected",
}

_WHAT = {
    ActionType.TRANSFER: "The transfer",
    ActionType.SWAP: "The swap",
    ActionType.CARD_FREEZE: "Freezing your card",
    ActionType.CARD_UNFREEZE: "Unfreezing your card",
    ActionType.CARD_LIMIT_SET: "The daily limit change",
}

# ERC-4337 EntryPoint refusal codes (AAxx) in plain words, by the most specific prefix.
_AA_REASONS = (
    ("AA21", "your account does not hold enough ETH to pay the network fee"),
    ("AA22", "it was no longer valid when it reached the network"),
    ("AA23", "your account did not accept the signature"),
    ("AA24", "the signature did not match your account"),
    ("AA25", "another operation from your account went first"),
    ("AA26", "too little gas was set aside for checking your signature"),
    ("AA1", "your account could not be set up on this chain"),
    ("AA2", "your account did not accept it"),
    ("AA3", "the fee sponsor refused to pay for it"),
    ("AA4", "too little gas was set aside for checking your signature"),
    ("AA5", "the network fee came out higher than planned"),
)
_AA_CODE = re.compile(r"\bAA\d\d\b")


def _failure_reason(action: Action) -> str:
    """The plain sentence that leads a `failed` action's page; the raw error follows it."""
    what = _WHAT.get(action.type, "This request")
    error = (action.error or "").strip()
    lowered = error.lower()
    if lowered.startswith("bundler "):
        code = _AA_CODE.search(error)
        why = next(
            (text for prefix, text in _AA_REASONS if code and code[0].startswith(prefix)), ""
        )
        because = f" ({why})" if why else ""
        return (
            f"{what} could not be completed: the network refused it before it reached the "
            f"chain{because}. Nothing was sent and your funds did not move."
        )
    if lowered.startswith("dropped"):
        return (
            f"{what} could not be completed: another operation from your account used its "
            "place first, so this one can never run. Nothing was sent by it."
        )
    if lowered.startswith("marked failed by staff"):
        return f"{what} was stopped by our support team and will not run."
    if action.type == ActionType.CARD_LIMIT_SET:
        if "expired in the delay module" in lowered:
            why = "it was not carried out in time in your card account's delay module, so it lapsed"
        elif "delay module refused" in lowered:
            why = "your card account's delay module refused it"
        else:
            why = "the change would not go through on chain"
        return f"{what} could not be completed: {why}. Your daily limit is unchanged."
    if action.type in (ActionType.CARD_FREEZE, ActionType.CARD_UNFREEZE):
        return f"{what} could not be completed: your card provider refused it. Nothing changed."
    if error.startswith("ERC20InsufficientBalance"):
        symbol = action.params.get("symbol")
        why = f"your account did not hold enough {symbol or 'of the token'}"
    elif error.startswith("ERC20InsufficientAllowance"):
        why = "the token allowance was too low"
    else:
        why = "it was rejected on chain" if action.tx_hash else "it did not go through"
    if action.tx_hash:
        return (
            f"{what} could not be completed: {why}. It was undone on chain, so your tokens "
            "did not move; the network fee for the attempt may have been charged."
        )
    return f"{what} could not be completed: {why}."


def _short_hash(value: str | None) -> str:
    return f"{value[:10]}…{value[-8:]}" if value and len(value) > 20 else (value or "")


def _page_version(action: Action) -> str:
    """Changes whenever anything the status partial shows changes (not only `updated_at`: an
    error recorded without a transition must reach the page too)."""
    shown = "|".join(
        str(v)
        for v in (
            action.updated_at.isoformat(),
            action.status,
            action.error,
            action.tx_hash,
            action.block_number,
        )
    )
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


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
    ms_left = max(int((action.expires_at - timezone.now()).total_seconds() * 1000), 0)
    return render_timeline(
        request,
        template="actions/sign.html",
        version=_page_version(action),
        is_terminal=action.is_terminal,
        context={
            "action": action,
            "status_label": STATUS_LABELS.get(action.status, action.status),
            "ms_left": ms_left,
            "time_left": _time_left_text(ms_left // 1000),
            "failure_reason": _failure_reason(action)
            if action.status == ActionStatus.FAILED
            else "",
            "short_tx_hash": _short_hash(action.tx_hash),
            "slippage_warning": slippage is not None and float(slippage) >= 1,
        },
    )


def sign_events(request: HttpRequest, action_id) -> HttpResponse:
    """The signing page's live stream: the owner's own action only. A refusal is the API's
    error body, never a redirect to the login page (an EventSource cannot log in)."""
    if not request.user.is_authenticated:
        return _refusal("Log in to follow this action", code="not_authenticated", status=403)
    action = _own_action(request, action_id)
    if action is None:
        return _refusal(NOT_YOURS, code="permission_denied", status=403)
    return entity_stream(request, lifecycle_name="action", pk=action.pk, status=action.status)


@login_required
@require_POST
def sign_options(request: HttpRequest, action_id) -> HttpResponse:
    action = _own_action(request, action_id)
    if action is None:
        return _refusal(NOT_YOURS, code="permission_denied", status=403)
    try:
        return HttpResponse(authentication_options(action=action), content_type="application/json")
    except PasskeyError as exc:
        return _refusal(str(exc), code="passkey_refused", status=400)


@login_required
@require_POST
def sign_approve(request: HttpRequest, action_id) -> JsonResponse:
    if _own_action(request, action_id) is None:
        return _refusal(NOT_YOURS, code="permission_denied", status=403)
    try:
        credential_json = json_body(request)
    except BodyRefused as exc:
        return _unreadable(exc)
    try:
        action = action_sign(
            action_id=action_id, user=request.user, credential_json=credential_json
        )
    except PasskeyError as exc:
        return _refusal(str(exc), code="conflict", status=409)
    return JsonResponse({"status": action.status})


@login_required
@require_POST
def sign_reject(request: HttpRequest, action_id) -> HttpResponse:
    if _own_action(request, action_id) is None:
        return _refused(request)
    try:
        action_reject(action_id=action_id, user=request.user)
    except PasskeyError as exc:
        return _refusal(str(exc), code="conflict", status=409)
    return JsonResponse({"status": "rejected"})
