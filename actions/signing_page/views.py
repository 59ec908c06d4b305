"""The signing page and the activity page: an action as its owner reads it, signs it or declines
it (session login, owner only)."""

from __future__ import annotations

import hashlib
import re

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from actions.accounts.models import OwnerState
from actions.accounts.public import approving_passkey_count, passkeys_for_user
from actions.bridges.public import action_outcome, bridge_leg_of, bridge_leg_words, leg_open
from actions.errors import PasskeyError
from actions.execution.models import Action, ActionStatus, ActionType
from actions.execution.public import (
    action_expire_if_overdue,
    action_reject,
    action_sign,
    action_signer,
    action_status_refresh,
    actions_for_user,
    authentication_options,
    swap_quote_bounded,
)
from actions.pages import assertion_step, passkey_refusal, refusal
from actions.signing_page.facts import activity_facts, sign_facts
from core.chains import chain_name
from core.live import entity_stream
from core.templatetags.chains import explorer_url
from core.timeline import render_timeline

NOT_YOURS = "This signing link is not for your account"


@login_required
def activity_page(request: HttpRequest) -> HttpResponse:
    """The end user's front door: what their agents asked for lately, and their passkeys."""
    # A request past its deadline is expired here (as its signing page would), never listed as
    # waiting for an approval it can no longer get.
    actions = [action_expire_if_overdue(action=a) for a in actions_for_user(user=request.user)]
    facts = activity_facts(actions)
    for action in actions:
        action.status_label = STATUS_LABELS.get(action.status, action.status)
        action.type_label = TYPE_LABELS.get(action.type, action.type)
        action.facts = facts[action.pk]
    return render(
        request,
        "actions/activity.html",
        {
            "actions": actions,
            "approving_passkeys": approving_passkey_count(user=request.user),
            "waiting": sum(1 for a in actions if a.status == ActionStatus.PROPOSED),
        },
    )


def _own_action(request: HttpRequest, action_id) -> Action | None:
    """The action if it is the logged-in user's; None tells nothing about whether it exists."""
    return Action.objects.filter(pk=action_id, user=request.user).first()


def _refused(request: HttpRequest) -> HttpResponse:
    return render(request, "actions/sign_refused.html", status=403)


def _time_left_text(seconds: int) -> str:
    """Time left as a clock ("1:03:05", "14:05", "0:42"), as passkeys.js counts down: the
    same in every language."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


# What the user is told, status by status (the raw status stays in `data-status`).
STATUS_LABELS = {
    ActionStatus.PROPOSED: _("Waiting for your approval"),
    ActionStatus.SIGNED: _("Signed"),
    ActionStatus.SUBMITTED: _("Signed, sending"),
    ActionStatus.BROADCAST: _("Sent, waiting for the network"),
    ActionStatus.EXECUTED: _("Done"),
    ActionStatus.FAILED: _("Not completed"),
    ActionStatus.EXPIRED: _("Expired"),
    ActionStatus.REJECTED: _("Rejected"),
}
# An executed cross-chain swap whose bridge did not simply deliver (action_outcome).
OUTCOME_LABELS = {
    "refunded": _("Refunded"),
    "partial": _("Another token received"),
    "failed": _("Not completed"),
    "pending": _("Step 2 of 2 in progress"),
}

# The front door's list: what each request is, in a word or two.
TYPE_LABELS = {
    ActionType.TRANSFER: _("Payment"),
    ActionType.SWAP: _("Swap"),
    ActionType.CARD_FREEZE: _("Freeze card"),
    ActionType.CARD_UNFREEZE: _("Unfreeze card"),
    ActionType.CARD_LIMIT_SET: _("Card daily limit"),
    ActionType.SPEND_GRANT: _("Spending permission"),
    ActionType.SPEND_REVOKE: _("Revoke a spending permission"),
}

# Leads a sentence ("%(what)s could not be completed"); translators place it as their
# language needs ("Não foi possível concluir a transferência").
_WHAT = {
    ActionType.TRANSFER: _("The transfer"),
    ActionType.SWAP: _("The swap"),
    ActionType.CARD_FREEZE: _("Freezing your card"),
    ActionType.CARD_UNFREEZE: _("Unfreezing your card"),
    ActionType.CARD_LIMIT_SET: _("The daily limit change"),
    ActionType.SPEND_GRANT: _("The spending permission"),
    ActionType.SPEND_REVOKE: _("The revocation"),
}

# ERC-4337 EntryPoint refusal codes (AAxx) in plain words, by the most specific prefix.
_AA_REASONS = (
    ("AA21", _("your account does not hold enough ETH to pay the network fee")),
    ("AA22", _("it was no longer valid when it reached the network")),
    ("AA23", _("your account did not accept the signature")),
    ("AA24", _("the signature did not match your account")),
    ("AA25", _("another operation from your account went first")),
    ("AA26", _("too little gas was set aside for checking your signature")),
    ("AA1", _("your account could not be set up on this chain")),
    ("AA2", _("your account did not accept it")),
    ("AA3", _("the fee sponsor refused to pay for it")),
    ("AA4", _("too little gas was set aside for checking your signature")),
    ("AA5", _("the network fee came out higher than planned")),
)
_AA_CODE = re.compile(r"\bAA\d\d\b")


def _failure_reason(action: Action) -> str:
    """The plain sentence that leads a `failed` action's page; the raw error follows it."""
    what = _WHAT.get(action.type, _("This request"))
    error = (action.error or "").strip()
    lowered = error.lower()
    if lowered.startswith("bundler "):
        code = _AA_CODE.search(error)
        signer = action_signer(action) if code and code[0] == "AA24" else None
        if signer is not None and signer.owner_state == OwnerState.REMOVED and signer.removed_at:
            # Signed before the passkey left the account, refused on chain after: say so.
            return gettext(
                "%(what)s could not be completed: the passkey that signed it was removed from "
                "your account on %(date)s. Nothing was sent and your funds did not move."
            ) % {
                "what": what,
                "date": formats.date_format(timezone.localtime(signer.removed_at), "DATE_FORMAT"),
            }
        why = next(
            (text for prefix, text in _AA_REASONS if code and code[0].startswith(prefix)), ""
        )
        if why:
            return gettext(
                "%(what)s could not be completed: the network refused it before it reached "
                "the chain (%(why)s). Nothing was sent and your funds did not move."
            ) % {"what": what, "why": why}
        return gettext(
            "%(what)s could not be completed: the network refused it before it reached the "
            "chain. Nothing was sent and your funds did not move."
        ) % {"what": what}
    if lowered.startswith("dropped"):
        return gettext(
            "%(what)s could not be completed: another operation from your account used its "
            "place first, so this one can never run. Nothing was sent by it."
        ) % {"what": what}
    if lowered.startswith("marked failed by staff"):
        return gettext("%(what)s was stopped by our support team and will not run.") % {
            "what": what
        }
    if action.type == ActionType.CARD_LIMIT_SET:
        if "expired in the delay module" in lowered:
            why = gettext(
                "it was not carried out in time in your card account's delay module, so it lapsed"
            )
        elif "delay module refused" in lowered:
            why = gettext("your card account's delay module refused it")
        else:
            why = gettext("the change would not go through on chain")
        return gettext(
            "%(what)s could not be completed: %(why)s. Your daily limit is unchanged."
        ) % {"what": what, "why": why}
    if action.type in (ActionType.CARD_FREEZE, ActionType.CARD_UNFREEZE):
        return gettext(
            "%(what)s could not be completed: your card provider refused it. Nothing changed."
        ) % {"what": what}
    if error.startswith("ERC20InsufficientBalance"):
        symbol = action.params.get("symbol")
        why = (
            gettext("your account did not hold enough %(symbol)s") % {"symbol": symbol}
            if symbol
            else gettext("your account did not hold enough of the token")
        )
    elif error.startswith("ERC20InsufficientAllowance"):
        why = gettext("the token allowance was too low")
    else:
        why = (
            gettext("it was rejected on chain")
            if action.tx_hash
            else gettext("it did not go through")
        )
    if action.tx_hash:
        return gettext(
            "%(what)s could not be completed: %(why)s. It was undone on chain, so your tokens "
            "did not move; the network fee for the attempt may have been charged."
        ) % {"what": what, "why": why}
    return gettext("%(what)s could not be completed: %(why)s.") % {"what": what, "why": why}


def _short_hash(value: str | None) -> str:
    return f"{value[:10]}…{value[-8:]}" if value and len(value) > 20 else (value or "")


def _tx_link(action: Action) -> str:
    """The short tx hash, a link to the chain's explorer where the chain table has one."""
    shown = _short_hash(action.tx_hash)
    url = explorer_url(action.chain_id, "tx", action.tx_hash)
    if url is None:
        return shown
    return format_html('<a class="explorer" href="{}" rel="noopener noreferrer">{}</a>', url, shown)


def _page_version(action: Action, leg=None) -> str:
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
            leg and (leg.status, leg.substatus, leg.receiving_tx_hash),
        )
    )
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


_NEXT_STEP = {
    ActionStatus.FAILED: _(
        "What now: if you still want it, ask your assistant to propose it again. If your "
        "balance looks wrong, contact Picnic support and give them the reference below."
    ),
    ActionStatus.EXPIRED: _(
        "What now: if you still want it, ask your assistant to propose it again and sign it "
        "before the time runs out."
    ),
    ActionStatus.REJECTED: _(
        "What now: nothing. If you rejected it by mistake, ask your assistant to propose it again."
    ),
}


def _signing_passkey_context(action: Action) -> dict:
    """Which passkey signs: the user's active ones by name while it waits, the one that
    signed afterwards (its history row names it)."""
    signed_with = action_signer(action)
    names = []
    if signed_with is None and action.status == ActionStatus.PROPOSED:
        names = [
            p.name or gettext("Passkey %(n)s") % {"n": n}
            for n, p in enumerate(passkeys_for_user(user=action.user), start=1)
            if p.owner_state == OwnerState.ACTIVE
        ]
    return {"signed_with": signed_with, "signing_passkeys": names}


@login_required
def sign_page(request: HttpRequest, action_id) -> HttpResponse:
    action = _own_action(request, action_id)
    if action is None:
        return _refused(request)
    action = action_expire_if_overdue(action=action)
    if request.htmx or request.GET.get("u"):
        action = action_status_refresh(action=action)
        action.refresh_from_db()
    ms_left = max(int((action.expires_at - timezone.now()).total_seconds() * 1000), 0)
    # The facts (prices, tokens) are outside the live partial: only the full page reads them.
    facts = {} if request.htmx else sign_facts(action)
    slippage = facts.get("slippage")
    leg = bridge_leg_of(action)
    outcome = action_outcome(action, leg)[0]
    status_label = STATUS_LABELS.get(action.status, action.status)
    if action.status == ActionStatus.EXECUTED:
        status_label = OUTCOME_LABELS.get(outcome, status_label)
    return render_timeline(
        request,
        template="actions/sign.html",
        version=_page_version(action, leg),
        # An executed cross-chain swap stays live until its bridge has finished.
        is_terminal=action.is_terminal and not leg_open(action, leg),
        context={
            "action": action,
            "bridge_leg": leg,
            "bridge_text": bridge_leg_words(action, leg) if leg else "",
            "bridge_destination": chain_name(leg.to_chain_id) if leg else "",
            # The receiving transaction, linked to its chain's explorer where there is one.
            "bridge_tx_url": explorer_url(leg.receiving_chain_id, "tx", leg.receiving_tx_hash)
            if leg and leg.receiving_tx_hash
            else None,
            "bridge_waiting": leg_open(action, leg),
            "quote_expired": action.status == ActionStatus.EXPIRED and swap_quote_bounded(action),
            "facts": facts,
            "status_label": status_label,
            "outcome": outcome,
            "ms_left": ms_left,
            "time_left": _time_left_text(ms_left // 1000),
            "failure_reason": _failure_reason(action)
            if action.status == ActionStatus.FAILED
            else "",
            "next_step": _NEXT_STEP.get(action.status, ""),
            "short_tx_hash": _tx_link(action),
            "slippage_warning": slippage is not None and slippage >= 1,
            "reject_confirm": request.GET.get("reject") == "confirm",
            **_signing_passkey_context(action),
        },
    )


def sign_events(request: HttpRequest, action_id) -> HttpResponse:
    """The signing page's live stream: the owner's own action only. A refusal is the API's
    error body, never a redirect to the login page (an EventSource cannot log in)."""
    if not request.user.is_authenticated:
        return refusal("Log in to follow this action", code="not_authenticated", status=403)
    action = _own_action(request, action_id)
    if action is None:
        return refusal(NOT_YOURS, code="permission_denied", status=403)
    return entity_stream(request, lifecycle_name="action", pk=action.pk, status=action.status)


@login_required
@require_POST
def sign_options(request: HttpRequest, action_id) -> HttpResponse:
    action = _own_action(request, action_id)
    if action is None:
        return refusal(NOT_YOURS, code="permission_denied", status=403)
    try:
        return HttpResponse(authentication_options(action=action), content_type="application/json")
    except PasskeyError as exc:
        return passkey_refusal(exc, status=400)


@login_required
@require_POST
def sign_approve(request: HttpRequest, action_id) -> JsonResponse:
    return assertion_step(
        request,
        owned=_own_action(request, action_id) is not None,
        not_yours=NOT_YOURS,
        sign=lambda credential_json: action_sign(
            action_id=action_id, user=request.user, credential_json=credential_json
        ),
    )


@login_required
def sign_reject(request: HttpRequest, action_id) -> HttpResponse:
    """GET: the signing page with its reject confirmation open (no JavaScript needed). POST:
    reject, then back to the page (a form) or a JSON answer (the page's script)."""
    if _own_action(request, action_id) is None:
        return _refused(request)
    if request.method != "POST":
        return redirect(f"{reverse('sign', args=[action_id])}?reject=confirm#reject-confirm")
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        action_reject(action_id=action_id, user=request.user)
    except PasskeyError as exc:
        if wants_json:
            return passkey_refusal(exc, status=409)
    if wants_json:
        return JsonResponse({"status": "rejected"})
    return redirect("sign", action_id=action_id)
