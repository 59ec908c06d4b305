"""The ramps room's face: the user's ramp accounts and their KYC refresh."""

from __future__ import annotations

from actions.ramps.selectors import ramp_accounts_for_user
from actions.ramps.services import ramp_kyc_refresh, ramps_refresh_for_user

__all__ = [
    "ramp_accounts_for_user",
    "ramp_kyc_refresh",
    "ramps_refresh_for_user",
]
