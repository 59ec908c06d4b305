"""Fiat ramp adapters for get_profile: the user's KYC status at Monerium (EUR) and at
BRLA/Avenia (BRL), each in its provider's own vocabulary, normalised by a written table.

Monerium (API v2): `POST /auth/token` (form-encoded OAuth2 client credentials) →
`{"access_token", "expires_in", "token_type"}`; `GET /profiles/{profileId}` with
`Accept: application/vnd.monerium.api-v2+json` → `{"id", "name", "kind", "state"}`.

Avenia (API v2): `GET /v2/kyc/attempts?subAccountId=…` with the account's bearer token →
`{"attempts": [{"id", "levelName", "status", "result", "resultMessage", "createdAt", …}]}`;
the newest attempt decides, and no attempt at all means no KYC.

A provider that is down, slow, or says a word not in its table raises RampError: the caller
keeps the last status it knew and says why, it never guesses.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core.cache import cache

from actions.ramps.models import KycStatus, RampProvider
from core.http import JsonHttpClient, NotSent, OutcomeUnknown, problem_reason

# --- The mapping tables (README "KYC status mapping"); every value is tested. ---------------

# Monerium's profile `state`.
MONERIUM_KYC = {
    "created": KycStatus.NONE,  # profile exists, nothing submitted yet
    "pending": KycStatus.PENDING,  # submitted, under review
    "approved": KycStatus.APPROVED,
    "rejected": KycStatus.REJECTED,
    "blocked": KycStatus.REJECTED,  # approved once, now blocked: cannot ramp
}

# Avenia's newest KYC attempt, as "<status>" or "<status>:<result>"; "" = no attempt.
AVENIA_KYC = {
    "": KycStatus.NONE,
    "PENDING": KycStatus.PENDING,  # link issued / documents being submitted
    "PROCESSING": KycStatus.PENDING,  # submitted, being checked
    "COMPLETED:APPROVED": KycStatus.APPROVED,
    "COMPLETED:REJECTED": KycStatus.REJECTED,
    "EXPIRED": KycStatus.NONE,  # the 24 h window lapsed unfinished: start again
}

TABLES = {RampProvider.MONERIUM: MONERIUM_KYC, RampProvider.AVENIA: AVENIA_KYC}


class RampError(Exception):
    pass


def normalise(provider: str, provider_status: str) -> KycStatus:
    try:
        return TABLES[provider][provider_status]
    except KeyError:
        raise RampError(
            f"{RampProvider(provider).label} sent a KYC status we have no mapping for: "
            f"{provider_status!r}"
        ) from None


class _TokenRevoked(RampError):
    pass


def _get(
    client: JsonHttpClient,
    name: str,
    path: str,
    headers: dict[str, str],
    *,
    unauthorized: type[RampError] = RampError,
) -> Any:
    try:
        answer = client.call("GET", path, headers=headers)
    except (NotSent, OutcomeUnknown) as exc:
        raise RampError(f"{name} unavailable: {exc}") from None
    if answer.status == 401:
        reason, _ = problem_reason(answer)
        raise unauthorized(f"{name} refused our credentials (401): {reason}")
    if answer.status != 200:
        reason, _ = problem_reason(answer)
        raise RampError(f"{name} answered {answer.status}: {reason}")
    try:
        return answer.json()
    except ValueError:
        raise RampError(f"{name} answered something that is not JSON") from None


class MoneriumClient:
    def __init__(self, base_url: str, *, client_id: str, client_secret: str, timeout: float):
        self.http = JsonHttpClient(base_url, timeout=timeout, provider="ramp_monerium")
        self.client_id = client_id
        self.client_secret = client_secret

    @property
    def _token_key(self) -> str:
        return f"monerium-token:{self.http.host}:{self.http.port}:{self.client_id}"

    def _token(self) -> str:
        key = self._token_key
        token = cache.get(key)
        if token:
            return token
        form = urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": self.client_id,
                "client_secret": self.client_secret,
            }
        ).encode()
        try:
            answer = self.http.call(
                "POST",
                "/auth/token",
                body=form,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
        except (NotSent, OutcomeUnknown) as exc:
            raise RampError(f"Monerium unavailable: {exc}") from None
        if answer.status != 200:
            reason, _ = problem_reason(answer)
            raise RampError(f"Monerium refused our client credentials ({answer.status}): {reason}")
        try:
            body = answer.json()
            token, ttl = str(body["access_token"]), int(body.get("expires_in") or 300)
        except (ValueError, KeyError, TypeError):
            raise RampError("Monerium answered the token request without an access_token") from None
        cache.set(key, token, max(ttl - 30, 1))  # renew before it lapses
        return token

    def profile_state(self, profile_id: str) -> str:
        path = f"/profiles/{quote(profile_id, safe='')}"
        accept = "application/vnd.monerium.api-v2+json"
        try:
            body = _get(
                self.http,
                "Monerium",
                path,
                {"Authorization": f"Bearer {self._token()}", "Accept": accept},
                unauthorized=_TokenRevoked,
            )
        except _TokenRevoked:  # revoked or expired early: one fresh token, then give up
            cache.delete(self._token_key)
            body = _get(
                self.http,
                "Monerium",
                path,
                {"Authorization": f"Bearer {self._token()}", "Accept": accept},
            )
        if not isinstance(body, dict) or not isinstance(body.get("state"), str):
            raise RampError("Monerium sent a profile without a state")
        return body["state"]


class AveniaClient:
    def __init__(self, base_url: str, *, token: str, timeout: float):
        self.http = JsonHttpClient(base_url, timeout=timeout, provider="ramp_avenia")
        self.token = token

    def kyc_status(self, sub_account_id: str) -> str:
        body = _get(
            self.http,
            "Avenia",
            "/v2/kyc/attempts?" + urlencode({"subAccountId": sub_account_id}),
            {"Authorization": f"Bearer {self.token}", "Accept": "application/json"},
        )
        attempts = body.get("attempts") if isinstance(body, dict) else None
        if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
            raise RampError("Avenia sent KYC attempts that are not a list")
        if not attempts:
            return ""
        newest = max(attempts, key=lambda a: str(a.get("createdAt") or ""))
        status, result = str(newest.get("status") or ""), str(newest.get("result") or "")
        return f"{status}:{result}" if status == "COMPLETED" else status


def kyc_provider_status(provider: str, external_id: str) -> str:
    """The provider's own status word for this account (raises RampError)."""

    if provider == RampProvider.MONERIUM:
        return MoneriumClient(
            settings.MONERIUM_URL,
            client_id=settings.MONERIUM_CLIENT_ID,
            client_secret=settings.MONERIUM_CLIENT_SECRET,
            timeout=settings.RAMP_TIMEOUT_SECONDS,
        ).profile_state(external_id)
    return AveniaClient(
        settings.AVENIA_URL, token=settings.AVENIA_API_TOKEN, timeout=settings.RAMP_TIMEOUT_SECONDS
    ).kyc_status(external_id)
