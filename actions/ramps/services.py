"""Fiat ramps: the KYC status of each ramp account, refreshed from its provider on read."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from actions.providers.ramps import RampError, kyc_provider_status, normalise
from actions.ramps.models import RampAccount


def ramp_kyc_refresh(*, ramp_id: int, now: datetime | None = None) -> RampAccount:
    """Ask the ramp's provider for its KYC status and store both its word and ours. The
    provider is called outside any transaction; a failure (or a word with no mapping) keeps
    the last status we knew and records why."""

    ramp = RampAccount.objects.get(pk=ramp_id)
    now = now or timezone.now()
    try:
        said = kyc_provider_status(ramp.provider, ramp.external_id)
        status = normalise(ramp.provider, said)
    except RampError as exc:
        RampAccount.objects.filter(pk=ramp.pk).update(kyc_error=str(exc)[:2000])
    else:
        RampAccount.objects.filter(pk=ramp.pk).update(
            kyc_status=status, provider_status=said, kyc_checked_at=now, kyc_error=""
        )
    ramp.refresh_from_db()
    return ramp


def ramps_refresh_for_user(*, user) -> list[RampAccount]:
    return [
        ramp_kyc_refresh(ramp_id=pk)
        for pk in RampAccount.objects.filter(user=user)
        .order_by("currency")
        .values_list("pk", flat=True)
    ]
