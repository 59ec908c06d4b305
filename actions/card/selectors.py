"""Reads of the user's cards and their Gnosis Pay sessions from the database."""

from __future__ import annotations

from django.utils import timezone

from actions.card.models import Card, GnosisPaySession
from actions.errors import ActionNotFound
from actions.execution.models import Action, ActionStatus, ActionType
from core.echo import named


def card_get_for_user(*, user, card_id: str | None = None) -> Card:
    """The user's card by id, or their physical card."""
    cards = Card.objects.select_related("token", "physical", "physical__token").filter(user=user)
    card = (
        cards.filter(card_id=card_id).first() if card_id else cards.filter(is_virtual=False).first()
    )
    if card is None:
        raise ActionNotFound(
            f"Card not found: {named(card_id)}" if card_id else "No Picnic card for this user"
        )
    return card


def cards_for_user(*, user) -> list[Card]:
    return list(
        Card.objects.select_related("physical").filter(user=user).order_by("created_at", "pk")
    )


def card_state_last_executed(*, user_id, card_id: str) -> Action | None:
    """The last freeze or unfreeze of the card that we saw executed: its last confirmed state."""
    return (
        Action.objects.filter(
            user_id=user_id,
            type__in=(ActionType.CARD_FREEZE, ActionType.CARD_UNFREEZE),
            status=ActionStatus.EXECUTED,
            params__card_id=card_id,
        )
        .order_by("-executed_at")
        .first()
    )


def gnosis_pay_session_token(*, safe_address: str) -> str | None:
    """The unexpired Gnosis Pay JWT of the Safe's last passkey sign-in, if any."""
    session = GnosisPaySession.objects.filter(
        safe_address=safe_address.lower(), expires_at__gt=timezone.now()
    ).first()
    return session.token if session else None
