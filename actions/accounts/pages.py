"""The end user's passkeys page: passkey registration (the WebAuthn ceremony), rename, removal,
the time zone the browser reports. The device and recovery steps are device_views.py."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from actions.accounts.devices import device_link_bind, device_of, has_account
from actions.accounts.models import AccountChangeKind, AccountChangeStatus, OwnerState
from actions.accounts.owner_changes import owner_change_propose
from actions.accounts.passkeys import (
    PasskeyError,
    passkey_register,
    passkey_remove,
    passkey_rename,
    registration_options,
)
from actions.accounts.preferences import preferences_set_language, preferences_set_time_zone
from actions.accounts.selectors import (
    account_changes_for_user,
    end_user_accounts,
    passkeys_for_user,
    recovery_setup_of,
)
from actions.evm_clients import on_chain, tool_web3
from actions.pages import USER_MESSAGES, chain_page, passkey_refusal, refusal, unreadable
from core.chains import card_chain
from core.json_input import BodyRefused, json_body
from core.timezones import USER_ZONE_SESSION_KEY
from evm.passkey_account import PasskeyAccountClient

REGISTRATION_SESSION_KEY = "passkey_registration_challenge"
# Set when a device link is opened on the new device (device_views.py): the next passkey
# registered in this session belongs to that link.
DEVICE_LINK_SESSION_KEY = "device_link_id"


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


def _account_address(qx: bytes, qy: bytes) -> tuple[str, str]:
    # Asked of the card's chain; the factory's CREATE2 address, hence the account's, is the
    # same on every chain of the table.
    chain = card_chain()
    with on_chain(chain):  # a node that refuses is ChainUnavailable (chain_page), not a 500
        client = PasskeyAccountClient(
            tool_web3(chain.id), qx, qy, version=settings.ENTRY_POINT_VERSION
        )
        return client.address, client.factory.address


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
        return refusal("Not a known time zone", code="invalid", status=400)
    request.session[USER_ZONE_SESSION_KEY] = zone
    return HttpResponse(status=204)


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
        return refusal(
            "Start the registration again: no challenge is pending",
            code="no_challenge",
            status=400,
        )
    try:
        credential_json = json_body(request)
    except BodyRefused as exc:
        return unreadable(exc)
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
