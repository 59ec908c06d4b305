"""Reads of the user's ramp accounts."""

from __future__ import annotations

from actions.ramps.models import RampAccount


def ramp_accounts_for_user(*, user) -> list[RampAccount]:
    return list(RampAccount.objects.filter(user=user))
