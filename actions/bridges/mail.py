"""E-mail when a cross-chain swap's bridge finishes: the user has usually left the signing
page by then, and a refund must not look like a success. Written in the user's language
(actions.Preferences), sent once the leg's change is committed."""

from __future__ import annotations

from django.core.mail import send_mail
from django.utils.translation import gettext

from actions.accounts.public import in_users_words
from actions.bridges.models import BridgeLeg
from actions.bridges.words import bridge_leg_words


def _subject(leg: BridgeLeg) -> str:
    if leg.status == "FAILED":
        return gettext("Picnic: your swap did not arrive")
    if leg.substatus == "REFUNDED":
        return gettext("Picnic: your swap was refunded")
    if leg.substatus == "PARTIAL":
        return gettext("Picnic: your swap delivered another token")
    return gettext("Picnic: your swap arrived")


def bridge_leg_mail(*, leg_id) -> None:
    """Tell the user how the bridge of their swap ended, if they have an e-mail address."""
    leg = BridgeLeg.objects.select_related("action__user").get(pk=leg_id)
    user = leg.action.user
    if not user.email or not leg.finished:
        return
    with in_users_words(user):
        subject = _subject(leg)
        reference = gettext("Reference: %(id)s") % {"id": leg.action_id}
        body = f"{bridge_leg_words(leg.action, leg)}\n\n{reference}"
    send_mail(subject, body, None, [user.email])
