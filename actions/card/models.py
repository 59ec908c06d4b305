"""The card (a Gnosis Pay Safe) and the Gnosis Pay session kept for it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from actions.accounts.models import Token


class Card(models.Model):
    """A Picnic (Gnosis Pay) card; its account is a 1/1 Safe owned by the user's passkey account."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cards"
    )
    card_id = models.CharField(max_length=100, unique=True, help_text="Gnosis Pay card id")
    last4 = models.CharField(max_length=4)
    safe_address = models.CharField(max_length=42)
    chain_id = models.PositiveBigIntegerField()
    # The Safe's Zodiac modifiers: Delay (scheduled transactions) and Roles (the spending
    # allowance, i.e. the daily limit), and the token the card spends.
    delay_address = models.CharField(max_length=42, blank=True)
    roles_address = models.CharField(max_length=42, blank=True)
    token = models.ForeignKey(
        Token, null=True, blank=True, on_delete=models.PROTECT, related_name="cards"
    )
    is_virtual = models.BooleanField(default=False)
    physical = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="virtual_cards"
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"card •••• {self.last4} of {self.user}"


class GnosisPaySession(models.Model):
    """The JWT of the last passkey SIWE sign-in to Gnosis Pay for a card's Safe. Kept (in the
    database, so every process sees it) only until it expires, to read card purchases; it is
    a credential: never shown in the admin or the API."""

    safe_address = models.CharField(max_length=42, unique=True, help_text="lowercase")
    token = models.TextField()
    expires_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"Gnosis Pay session for {self.safe_address} until {self.expires_at:%H:%M}"
