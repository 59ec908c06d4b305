"""End-user pages: passkey registration and the signing page (session login, owner only)."""

from __future__ import annotations

import functools
import hashlib
import logging
import re

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from actions.bridge_words import bridge_leg_words
from actions.evm_clients import ChainUnavailable, on_chain
from actions.models import (
    AccountChangeKind,
    AccountChangeStatus,
    Action,
    ActionStatus,
    ActionType,
    OwnerState,
)
from actions.selectors import (
    account_changes_for_user,
    action_signer,
    actions_for_user,
    approving_passkey_count,
    end_user_accounts,
    passkeys_for_user,
    recovery_setup_of,
)
from actions.services.account_changes import owner_change_propose
from actions.services.bridges import action_outcome, bridge_leg_of, leg_open
from actions.services.devices import device_link_bind, device_of, has_account
from actions.services.lifecycle import (
    action_expire_if_overdue,
    action_status_refresh,
    swap_quote_bounded,
)
from actions.services.passkeys import (
    PasskeyError,
    passkey_register,
    passkey_remove,
    passkey_rename,
    registration_options,
)
from actions.services.preferences import preferences_set_language, preferences_set_time_zone
from actions.services.proposals import web3
from actions.services.signing import action_reject, action_sign, authentication_options
from actions.signing_facts import activity_facts, sign_facts
from core.api import error_json, failure_reason
from core.chains import card_chain, chain_name
from core.errors import DomainError
from core.json_input import BodyRefused, json_body
from core.live import entity_stream
from core.templatetags.chains import explorer_url
from core.timeline import render_timeline
from core.timezones import USER_ZONE_SESSION_KEY
from evm.passkey_account import PasskeyAccountClient

logger = logging.getLogger(__name__)

REGISTRATION_SESSION_KEY = "passkey_registration_challenge"
# Set when a device link is opened on the new device (device_views.py): the next passkey
# registered in this session belongs to that link.
DEVICE_LINK_SESSION_KEY = "device_link_id"


NOT_YOURS = "This signing link is not for your account"

# What the end user reads when a passkey step is refused, by PasskeyError.code: plain words in
# their language, never py_webauthn's English ("Response sign count of 2 was not greater…").
USER_MESSAGES = {
    "sign_count": _(
        "Your passkey's safety counter did not move forward, as happens when an older copy of "
        "the passkey is used. Nothing was signed. Try again on the device where you created "
        "it."
    ),
    "user_verification": _(
        "Your device did not confirm that it is you (fingerprint, face or screen lock). "
        "Nothing was signed. Try again and confirm on your device."
    ),
    "not_proposed": _(
        "This request can no longer be signed or rejected: it has moved on. The page shows "
        "where it is now."
    ),
    "wrong_passkey": _(
        "This passkey does not control the account of this request. Use the passkey that "
        "created your Picnic account."
    ),
    "no_passkey": _(
        "Your account has no passkey that can sign this. Register a passkey first, then come "
        "back to this page."
    ),
    "nothing_to_sign": _("This request has nothing to sign."),
    "change_expired": _(
        "This change expired: it was not approved in time. Nothing changed on your account. "
        "Start it again from your passkeys page."
    ),
    "agent_disconnected": _(
        "This request was withdrawn because you disconnected the app that asked for it. "
        "Nothing was sent, and it can no longer be signed."
    ),
    "recovery_passkey": _(
        "This passkey was created by a recovery with your recovery code. It can sign only "
        "after the safety delay, unless you cancel the recovery. It cannot be approved early."
    ),
    "change_in_progress": _(
        "Another change to your account is still being applied on every network. Nothing "
        "changed. Try again once it is done."
    ),
    "quote_expired": _(
        "The price quote for this swap expired before you signed, so it can no longer be "
        "signed: prices move, and the swap would not run at the price you saw. Nothing was "
        "sent. Ask your assistant for the swap again to get a fresh quote."
    ),
    "registration_refused": _(
        "Your passkey could not be registered. Nothing was saved. Try again, or try another "
        "device or browser."
    ),
    "unsupported_key": _(
        "This passkey uses a kind of key that Picnic accounts cannot use. Try another device."
    ),
    "no_challenge": _("The registration took too long or was interrupted. Start it again."),
    "owns_account": _(
        "This passkey owns your Picnic account: without it the account could not sign any "
        "more, so it cannot be removed."
    ),
    "last_passkey": _(
        "This is your only passkey and a request is waiting for your signature: it cannot be "
        "removed now."
    ),
    "not_found": _("This passkey is not on your account."),
    "passkey_removed": _(
        "This passkey was removed from your account. It can no longer sign for you: use one "
        "of your other devices."
    ),
    "passkey_pending": _(
        "This passkey is waiting for approval: open the Passkeys page on a device that already "
        "signs for you and approve it there. Nothing was signed."
    ),
    "passkey_removing": _(
        "This passkey is being removed from your account, so it can no longer sign. Nothing "
        "was signed."
    ),
    "last_owner": _(
        "This is the only passkey that signs for your account: it cannot be removed. Add "
        "another device first."
    ),
    "not_owner": _("This passkey does not sign for your account, so there is nothing to remove."),
    "self_removal": _("A passkey cannot remove itself: approve the removal on another device."),
    "not_pending": _("This device is not waiting for approval any more."),
    "no_account": _("Register your first passkey before adding another device."),
    "recovery_in_progress": _(
        "A recovery of this account is already in progress. Nothing changed."
    ),
    "permission_denied": _("This signing link is not for your account."),
    "not_authenticated": _("Sign in to follow this request."),
    "unreadable": _("What your browser sent could not be read. Nothing changed. Try again."),
    "chain_unavailable": _(
        "The network your account lives on is not answering right now. Nothing changed. Try "
        "again in a few minutes."
    ),
    "refused": _("Your passkey's answer could not be verified. Nothing was signed. Try again."),
}


CHANGE_STATUS_LABELS = {
    AccountChangeStatus.PROPOSED: _("Waiting for your approval"),
    AccountChangeStatus.SIGNED: _("Signed"),
    AccountChangeStatus.SUBMITTED: _("Signed, sending"),
    AccountChangeStatus.WAITING: _("Waiting for the safety delay"),
    AccountChangeStatus.EXECUTED: _("Done"),
    AccountChangeStatus.FAILED: _("Not completed"),
    AccountChangeStatus.CANCELLED: _("Cancelled"),
    AccountChangeStatus.EXPIRED: _("Expired"),
}

CHANGE_KIND_LABELS = {
    AccountChangeKind.ADD_OWNER: _("Add a device"),
    AccountChangeKind.REMOVE_OWNER: _("Remove a device"),
    AccountChangeKind.SET_RECOVERY: _("Set up your recovery code"),
    AccountChangeKind.RECOVERY: _("Recovery with your recovery code"),
    AccountChangeKind.CANCEL_RECOVERY: _("Cancel a recovery"),
}


def _refusal(detail: str, *, code: str, status: int, shown=None) -> JsonResponse:
    """The API's error body (`detail` in English, for logs and agents); `error` is what the
    page's script shows, in the user's language."""
    shown = shown or USER_MESSAGES.get(code, USER_MESSAGES["refused"])
    return error_json(detail, code=code, status=status, error=str(shown))


def domain_refusal(exc: DomainError, *, shown) -> JsonResponse:
    """A domain error's status, code and message as the page's JSON, with what it shows."""
    return _refusal(exc.message, code=exc.code, status=exc.status, shown=shown)


def refusal_words(exc: PasskeyError) -> str:
    """The sentence a refused passkey step shows, in the user's language (a removed passkey
    is told when it was removed)."""
    removed_at = getattr(exc, "removed_at", None)
    if exc.code == "passkey_removed" and removed_at:
        return gettext(
            "This passkey was removed from your account on %(date)s. It can no longer sign "
            "for you: use one of your other devices."
        ) % {"date": formats.date_format(timezone.localtime(removed_at), "DATE_FORMAT")}
    return str(USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))


def passkey_refusal(exc: PasskeyError, *, status: int) -> JsonResponse:
    return _refusal(str(exc), code=exc.code, status=status, shown=refusal_words(exc))


def _unreadable(exc: BodyRefused) -> JsonResponse:
    """Too large, not UTF-8 or nested too deep: refused before any JSON decoder reads it."""
    return _refusal(
        str(exc.detail),
        code=exc.detail.code,
        status=exc.status_code,
        shown=USER_MESSAGES["unreadable"],
    )


def assertion_step(request: HttpRequest, *, owned: bool, not_yours: str, sign) -> JsonResponse:
    """The page's assertion, posted as JSON, handed to `sign(credential_json)` (a service
    returning what it signed): refusals in the API's error shape, else the new status."""
    if not owned:
        return _refusal(not_yours, code="permission_denied", status=403)
    try:
        credential_json = json_body(request)
    except BodyRefused as exc:
        return _unreadable(exc)
    try:
        signed = sign(credential_json)
    except PasskeyError as exc:
        return passkey_refusal(exc, status=409)
    return JsonResponse({"status": signed.status})


def _account_address(qx: bytes, qy: bytes) -> tuple[str, str]:
    # Asked of the card's chain; the factory's CREATE2 address, hence the account's, is the
    # same on every chain of the table.
    chain = card_chain()
    with on_chain(chain):  # a node that refuses is ChainUnavailable (chain_page), not a 500
        client = PasskeyAccountClient(web3(chain.id), qx, qy, version=settings.ENTRY_POINT_VERSION)
        return client.address, client.factory.address


def chain_page(*, json: bool = False):
    """For a passkey page or step that needs the chain: a node that does not answer is a 503
    `chain_unavailable` (a page saying so, or the error body for the page's script), never a
    500. The services call the chain before they write, or inside their transaction: nothing
    is left half done."""

    def decorate(view):
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            try:
                return view(request, *args, **kwargs)
            except ChainUnavailable as exc:
                logger.warning("chain unavailable on %s: %s", request.path, exc)
                detail = f"{exc.chain.name} could not be read: {failure_reason(exc.cause)}"
                if json:
                    return _refusal(detail, code="chain_unavailable", status=503)
                response = render(
                    request,
                    "actions/chain_unavailable.html",
                    {"chain": exc.chain.name, "code": "chain_unavailable"},
                    status=503,
                )
                response["Retry-After"] = "60"
                return response

        return wrapped

    return decorate


class PasskeyNameForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, strip=True)


@login_required
@chain_page()
def passkeys_page(request: HttpRequest) -> HttpResponse:
    # The page where devices and recovery are managed: its language is the one the e-mails
    # about them are written in.
    preferences_set_language(user=request.user, language=request.LANGUAGE_CODE)
    passkeys = list(passkeys_for_user(user=request.user))
    changes = account_changes_for_user(user=request.user)
    for change in changes:
        change.kind_label = CHANGE_KIND_LABELS.get(change.kind, change.kind)
        change.status_label = CHANGE_STATUS_LABELS.get(change.status, change.status)
    live = sum(1 for p in passkeys if p.owner_state == OwnerState.ACTIVE)
    return render(
        request,
        "actions/passkeys.html",
        {
            "passkeys": passkeys,
            "accounts": end_user_accounts(user=request.user),
            "live_owners": live,
            "can_approve": live > 0,
            "changes": changes,
            "recoveries": [
                c
                for c in changes
                if c.kind == AccountChangeKind.RECOVERY
                and c.status in (AccountChangeStatus.SUBMITTED, AccountChangeStatus.WAITING)
            ],
            "recovery_setup": recovery_setup_of(user=request.user),
        },
    )


@login_required
@require_POST
def time_zone_set(request: HttpRequest) -> HttpResponse:
    """The browser's own time zone (picnic/local_time.js sends it when it differs from the
    page's): stored with the user, used from the next page on."""
    zone = preferences_set_time_zone(user=request.user, name=request.POST.get("time_zone", ""))
    if zone is None:
        return _refusal("Not a known time zone", code="invalid", status=400)
    request.session[USER_ZONE_SESSION_KEY] = zone
    return HttpResponse(status=204)


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


def _back_to_passkeys(
    request: HttpRequest, message, *, level: int = messages.ERROR
) -> HttpResponse:
    # Post/redirect/get; the end-user base template shows the message once, in a status region.
    messages.add_message(request, level, message)
    return redirect("passkeys")


@login_required
@require_POST
@chain_page()
def passkey_rename_view(request: HttpRequest, passkey_id: int) -> HttpResponse:
    form = PasskeyNameForm(request.POST)
    if not form.is_valid():
        return _back_to_passkeys(request, _("Give the passkey a name of 1 to 100 characters."))
    try:
        passkey_rename(user=request.user, passkey_id=passkey_id, name=form.cleaned_data["name"])
    except PasskeyError as exc:
        return _back_to_passkeys(request, USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))
    return _back_to_passkeys(request, _("Passkey renamed."), level=messages.SUCCESS)


@login_required
@chain_page()
def passkey_remove_view(request: HttpRequest, passkey_id: int) -> HttpResponse:
    """GET asks for confirmation (a page of its own: works without JavaScript); POST removes."""
    passkey = passkeys_for_user(user=request.user).filter(pk=passkey_id).first()
    if passkey is None:
        return _back_to_passkeys(request, USER_MESSAGES["not_found"])
    if request.method != "POST":
        return render(request, "actions/passkey_remove.html", {"passkey": passkey})
    if passkey.owner_state == OwnerState.ACTIVE and has_account(user=request.user):
        # An owner on chain: a removeOwnerAtIndex op on every chain, signed by another owner.
        try:
            change = owner_change_propose(
                user=request.user, kind=AccountChangeKind.REMOVE_OWNER, passkey=passkey
            )
        except PasskeyError as exc:
            return _back_to_passkeys(request, USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))
        return redirect("account-change", change_id=change.pk)
    try:
        passkey_remove(user=request.user, passkey_id=passkey_id)
    except PasskeyError as exc:
        return _back_to_passkeys(request, USER_MESSAGES.get(exc.code, USER_MESSAGES["refused"]))
    return _back_to_passkeys(request, _("Passkey removed."), level=messages.SUCCESS)


@login_required
@require_POST
@chain_page(json=True)
def passkey_register_options(request: HttpRequest) -> HttpResponse:
    options, challenge = registration_options(user=request.user)
    request.session[REGISTRATION_SESSION_KEY] = challenge.hex()
    return HttpResponse(options, content_type="application/json")


@login_required
@require_POST
@chain_page(json=True)
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
            device=device_of(request),
        )
    except PasskeyError as exc:
        return passkey_refusal(exc, status=400)
    link_id = request.session.pop(DEVICE_LINK_SESSION_KEY, None)
    if link_id is not None:
        device_link_bind(link_id=link_id, user=request.user, passkey=passkey)
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
