"""The user's accounts at the fiat on/off-ramp providers."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class RampCurrency(models.TextChoices):
    BRL = "BRL", "Brazilian real"
    EUR = "EUR", "Euro"


class RampProvider(models.TextChoices):
    AVENIA = "avenia", "BRLA / Avenia"
    MONERIUM = "monerium", "Monerium"


# The provider that serves each fiat currency (SPEC: BRL at BRLA/Avenia, EUR at Monerium).
RAMP_PROVIDER_FOR = {RampCurrency.BRL: RampProvider.AVENIA, RampCurrency.EUR: RampProvider.MONERIUM}


class KycStatus(models.TextChoices):
    """Every provider's own KYC vocabulary, normalised (see actions/providers/ramps.py)."""

    NONE = "none", "None"
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"


class RampAccount(models.Model):
    """The user's account at a fiat on/off-ramp provider, one per currency. The KYC status is
    the provider's, refreshed on read; we keep its own word for it beside our normalised one."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ramp_accounts"
    )
    currency = models.CharField(max_length=3, choices=RampCurrency.choices)
    provider = models.CharField(max_length=16, choices=RampProvider.choices)
    external_id = models.CharField(
        max_length=100, help_text="Monerium profile id / Avenia subaccount id"
    )
    kyc_status = models.CharField(max_length=16, choices=KycStatus.choices, default=KycStatus.NONE)
    provider_status = models.CharField(
        max_length=100, blank=True, help_text="The provider's own status, as it said it"
    )
    kyc_checked_at = models.DateTimeField(null=True, blank=True)
    kyc_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        permissions = [
            ("refresh_kyc_rampaccount", "Can refresh the KYC status from the provider"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["user", "currency"], name="ramp_one_per_currency"),
            models.CheckConstraint(
                condition=Q(kyc_status__in=KycStatus.values), name="ramp_kyc_status_valid"
            ),
            models.CheckConstraint(
                condition=(
                    Q(currency="BRL", provider="avenia") | Q(currency="EUR", provider="monerium")
                ),
                name="ramp_provider_serves_currency",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.currency} ramp at {self.provider} for {self.user}"
