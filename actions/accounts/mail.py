"""E-mail about account changes: a device added or removed, a recovery started or completed.
Written in the user's language and time zone (actions.Preferences, else the site's), sent
once the change is committed (Django's mail backend; `make run` prints them)."""

from __future__ import annotations

from django.core.mail import send_mail
from django.db import transaction
from django.utils.translation import gettext

from actions.accounts.models import AccountChange, AccountChangeKind
from actions.accounts.preferences import in_users_words
from core.l10n import format_datetime
from core.user_agents import device_description

K = AccountChangeKind

DEVICE_ADDED = "device_added"
DEVICE_REMOVED = "device_removed"
RECOVERY_STARTED = "recovery_started"
RECOVERY_DONE = "recovery_done"


def _device(change: AccountChange) -> str:
    passkey = change.passkey
    if passkey is None:
        return gettext("a passkey")
    return passkey.name or device_description(passkey.user_agent) or gettext("a passkey")


def _device_words(event: str) -> tuple[str, str]:
    if event == DEVICE_ADDED:
        return gettext("Picnic: a device was added to your account"), gettext(
            "A new passkey (%(device)s) became an owner of your Picnic account on %(when)s: it "
            "can now sign for you.\n\nIf this was not you, remove it on the Passkeys page from "
            "one of your devices."
        )
    return gettext("Picnic: a device was removed from your account"), gettext(
        "The passkey %(device)s was removed from your Picnic account on %(when)s: it no "
        "longer signs for you.\n\nIf this was not you, open Picnic on one of your devices "
        "now."
    )


def _words(event: str, change: AccountChange) -> tuple[str, str]:
    """Subject and body, in the active language and time zone."""
    if event in (DEVICE_ADDED, DEVICE_REMOVED):
        subject, body = _device_words(event)
        when = format_datetime(change.executed_at or change.updated_at)
        return subject, body % {"device": _device(change), "when": when}
    if event == RECOVERY_STARTED:
        return gettext("Picnic: someone started recovering your account"), gettext(
            "A recovery of your Picnic account was started with your recovery code. Once "
            "the safety delay has passed (%(ready)s), a new passkey will be able to sign "
            "for your account.\n\nIf this was not you, open Picnic on one of your devices "
            "and cancel it on the Passkeys page before then."
        ) % {"ready": format_datetime(change.ready_at) if change.ready_at else "—"}
    return gettext("Picnic: your account was recovered"), gettext(
        "The recovery of your Picnic account is complete: the new passkey can now sign "
        "for your account. If this was not you, contact Picnic support now."
    )


def account_change_mail(*, change_id, event: str) -> None:
    """Tell the user about `event` of change `change_id`, if they have an e-mail address."""
    change = AccountChange.objects.select_related("user", "passkey").get(pk=change_id)
    if not change.user.email:
        return
    with in_users_words(change.user):
        subject, body = _words(event, change)
    send_mail(subject, body, None, [change.user.email])


def mail_on_commit(change: AccountChange, event: str) -> None:
    transaction.on_commit(lambda: account_change_mail(change_id=change.pk, event=event))
