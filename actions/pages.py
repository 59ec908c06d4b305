"""What every end-user page of the app shares: refusals in the API's error body with the words
the page shows (USER_MESSAGES), the assertion step of a passkey prompt, and the page that says
a chain is not answering (`chain_page`)."""

from __future__ import annotations

import functools
import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import formats, timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from actions.errors import PasskeyError
from actions.evm_clients import ChainUnavailable
from core.api import error_json, failure_reason
from core.errors import DomainError
from core.json_input import BodyRefused, json_body

logger = logging.getLogger(__name__)

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


def refusal(detail: str, *, code: str, status: int, shown=None) -> JsonResponse:
    """The API's error body (`detail` in English, for logs and agents); `error` is what the
    page's script shows, in the user's language."""
    shown = shown or USER_MESSAGES.get(code, USER_MESSAGES["refused"])
    return error_json(detail, code=code, status=status, error=str(shown))


def domain_refusal(exc: DomainError, *, shown) -> JsonResponse:
    """A domain error's status, code and message as the page's JSON, with what it shows."""
    return refusal(exc.message, code=exc.code, status=exc.status, shown=shown)


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
    return refusal(str(exc), code=exc.code, status=status, shown=refusal_words(exc))


def unreadable(exc: BodyRefused) -> JsonResponse:
    """Too large, not UTF-8 or nested too deep: refused before any JSON decoder reads it."""
    return refusal(
        str(exc.detail),
        code=exc.detail.code,
        status=exc.status_code,
        shown=USER_MESSAGES["unreadable"],
    )


def assertion_step(request: HttpRequest, *, owned: bool, not_yours: str, sign) -> JsonResponse:
    """The page's assertion, posted as JSON, handed to `sign(credential_json)` (a service
    returning what it signed): refusals in the API's error shape, else the new status."""
    if not owned:
        return refusal(not_yours, code="permission_denied", status=403)
    try:
        credential_json = json_body(request)
    except BodyRefused as exc:
        return unreadable(exc)
    try:
        signed = sign(credential_json)
    except PasskeyError as exc:
        return passkey_refusal(exc, status=409)
    return JsonResponse({"status": signed.status})


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
                    return refusal(detail, code="chain_unavailable", status=503)
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
