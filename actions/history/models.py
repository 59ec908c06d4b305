"""The transaction history: Transfer logs read from the chain, card purchases, and the
history entries the read tool pages through."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from actions.accounts.models import Token
from actions.card.models import Card
from actions.execution.models import Action


class TokenTransfer(models.Model):
    """An ERC-20 Transfer log that touches one of our users' accounts, indexed from the chain."""

    chain_id = models.PositiveBigIntegerField()
    tx_hash = models.CharField(max_length=66)
    log_index = models.PositiveIntegerField()
    block_number = models.PositiveBigIntegerField()
    block_time = models.DateTimeField()
    token = models.ForeignKey(Token, on_delete=models.PROTECT, related_name="transfers")
    from_address = models.CharField(max_length=42, db_index=True)
    to_address = models.CharField(max_length=42, db_index=True)
    # uint256 as decimal digits: exact on every database (SQLite would round a DECIMAL this big)
    units = models.CharField(max_length=78)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chain_id", "tx_hash", "log_index"], name="token_transfer_unique"
            )
        ]
        indexes = [models.Index(fields=["chain_id", "tx_hash"], name="token_transfer_tx")]

    def __str__(self) -> str:
        return f"{self.units} {self.token.symbol} {self.from_address} → {self.to_address}"


class CardPurchase(models.Model):
    """A card transaction as Gnosis Pay's `GET /api/v1/cards/transactions` reports it."""

    card = models.ForeignKey(Card, on_delete=models.CASCADE, related_name="purchases")
    thread_id = models.CharField(max_length=100, unique=True, help_text="Gnosis Pay threadId")
    occurred_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)
    is_pending = models.BooleanField()
    kind = models.CharField(max_length=20, help_text="Payment, Refund or Reversal")
    status = models.CharField(max_length=40)
    mcc = models.CharField(max_length=4)
    merchant = models.JSONField()
    country = models.JSONField(null=True, blank=True)
    billing_amount = models.BigIntegerField(help_text="minor units of billing_currency")
    billing_currency = models.JSONField()
    transaction_amount = models.BigIntegerField(help_text="minor units, local currency")
    transaction_currency = models.JSONField()
    transaction_type = models.CharField(max_length=10, blank=True)
    tx_hashes = models.JSONField(default=list, blank=True)
    raw = models.JSONField()
    synced_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.kind} at {self.merchant.get('name', '?')} ({self.thread_id})"


class HistoryKind(models.TextChoices):
    TRANSFER = "transfer", "Transfer"
    SWAP = "swap", "Swap"
    RAMP = "ramp", "Ramp"
    INVESTMENT = "investment", "Investment"
    CARD_PURCHASE = "cardPurchase", "Card purchase"
    CARD_FREEZE = "cardFreeze", "Card frozen"
    CARD_UNFREEZE = "cardUnfreeze", "Card unfrozen"
    CARD_LIMIT = "cardLimitSet", "Card limit set"


class HistoryEntry(models.Model):
    """One line of get_transactions: an on-chain transaction of the user (its flows are the
    TokenTransfers with its hash), an executed action, or a card purchase, merged by tx hash.
    Rows are only ever added or enriched, and pages are keyset on (occurred_at, id), so a
    page boundary never moves when newer entries arrive."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="history_entries"
    )
    occurred_at = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=HistoryKind.choices)
    chain_id = models.PositiveBigIntegerField(null=True, blank=True)
    tx_hash = models.CharField(max_length=66, null=True, blank=True)
    action = models.OneToOneField(
        Action, null=True, blank=True, on_delete=models.SET_NULL, related_name="history_entry"
    )
    card_purchase = models.OneToOneField(
        CardPurchase,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="history_entry",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "chain_id", "tx_hash"],
                condition=Q(tx_hash__isnull=False),
                name="history_one_entry_per_tx",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=HistoryKind.values), name="history_kind_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["user", "-occurred_at", "-id"], name="history_page"),
        ]
        verbose_name_plural = "history entries"

    def __str__(self) -> str:
        return f"{self.kind} of {self.user} at {self.occurred_at:%Y-%m-%d %H:%M}"
