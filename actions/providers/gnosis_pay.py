"""Gnosis Pay API adapter: SIWE sign-in and card freeze/unfreeze/status.

`GET /api/v1/auth/nonce` (plain-text nonce) → the Safe owner signs a SIWE (EIP-4361) message
for the Safe → `POST /api/v1/auth/challenge {message, signature}` → `{"token": <JWT>}`
(verified by Gnosis Pay through EIP-1271 on the Safe) → `POST /api/v1/cards/{id}/freeze` or
`/unfreeze`, `GET /api/v1/cards/{id}/status` (`isFrozen`, `statusCode`, …) with the JWT, and
`GET /api/v1/cards/transactions?limit=&offset=` → `{"count", "next", "previous", "results":
[{threadId, createdAt, clearedAt, isPending, mcc, merchant{name, city, country}, billingAmount,
billingCurrency{symbol, code, decimals, name}, transactionAmount, transactionCurrency,
transactionType, cardToken, kind, status, country, transactions[{hash, …}]}]}`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from core.http import JsonHttpClient, NotSent, OutcomeUnknown, problem_reason


class GnosisPayError(Exception):
    def __init__(self, message: str, *, status: int | None = None, payload: Any = None):
        self.status = status
        self.payload = payload
        super().__init__(message)


class Unauthorized(GnosisPayError):
    """401: the SIWE signature was refused, or the JWT expired."""


class Conflict(GnosisPayError):
    """409: the card is already in the requested state (or in one that forbids it)."""


class Unavailable(GnosisPayError):
    """Not reached, timed out, or a 5xx: the outcome of a write is unknown."""


# A card transaction must carry these for us to show it (the rest is kept raw).
PURCHASE_FIELDS = (
    "threadId",
    "createdAt",
    "isPending",
    "mcc",
    "merchant",
    "billingAmount",
    "billingCurrency",
    "transactionAmount",
    "transactionCurrency",
    "kind",
    "status",
)


def jwt_expiry(token: str) -> datetime | None:
    """The `exp` claim of a JWT (not verified: Gnosis Pay checks its own tokens)."""

    try:
        claims = token.split(".")[1]
        exp = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["exp"]
        return datetime.fromtimestamp(int(exp), UTC)
    except (IndexError, ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class CardStatus:
    is_frozen: bool
    status_code: int | None
    raw: dict[str, Any]


def siwe_message(
    *,
    domain: str,
    address: str,
    uri: str,
    chain_id: int,
    nonce: str,
    issued_at: datetime,
    statement: str,
) -> str:
    """An EIP-4361 message, exactly in the standard's layout."""
    return (
        f"{domain} wants you to sign in with your Ethereum account:\n{address}\n\n{statement}\n\n"
        f"URI: {uri}\nVersion: 1\nChain ID: {chain_id}\nNonce: {nonce}\n"
        f"Issued At: {issued_at.isoformat().replace('+00:00', 'Z')}"
    )


class GnosisPayClient:
    def __init__(self, base_url: str, *, timeout: float):
        self.http = JsonHttpClient(base_url, timeout=timeout, provider="gnosis_pay")
        self.domain = urlsplit(base_url).netloc

    def _call(self, method: str, path: str, *, body: Any = None, token: str | None = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            answer = self.http.call(method, path, body=body, headers=headers)
        except (NotSent, OutcomeUnknown) as exc:
            raise Unavailable(f"Gnosis Pay unavailable: {exc}") from None
        if 200 <= answer.status < 300:
            return answer
        reason, payload = problem_reason(answer)
        kind = {401: Unauthorized, 409: Conflict}.get(answer.status)
        if kind is None:
            kind = Unavailable if answer.status >= 500 else GnosisPayError
        raise kind(
            f"Gnosis Pay HTTP {answer.status}: {reason}", status=answer.status, payload=payload
        )

    def nonce(self) -> str:
        nonce = self._call("GET", "/api/v1/auth/nonce").raw.decode().strip().strip('"')
        if not nonce.isalnum():
            raise Unavailable(f"Gnosis Pay sent an unusable nonce: {nonce[:40]!r}")
        return nonce

    def challenge(self, *, message: str, signature: str) -> str:
        answer = self._call(
            "POST", "/api/v1/auth/challenge", body={"message": message, "signature": signature}
        )
        try:
            return str(answer.json()["token"])
        except (ValueError, KeyError, TypeError):
            raise Unavailable("Gnosis Pay answered the challenge without a token") from None

    def set_frozen(self, *, card_id: str, frozen: bool, token: str) -> None:
        verb = "freeze" if frozen else "unfreeze"
        self._call("POST", f"/api/v1/cards/{quote(card_id, safe='')}/{verb}", token=token)

    def status(self, *, card_id: str, token: str) -> CardStatus:
        raw = self._call(
            "GET", f"/api/v1/cards/{quote(card_id, safe='')}/status", token=token
        ).json()
        if not isinstance(raw, dict) or not isinstance(raw.get("isFrozen"), bool):
            raise Unavailable("Gnosis Pay sent a card status without isFrozen")
        return CardStatus(raw["isFrozen"], raw.get("statusCode"), raw)

    def card_transactions(self, *, token: str, page_size: int = 100, max_pages: int = 20):
        """Every card transaction of the signed-in account, following `next` page by page."""
        results: list[dict[str, Any]] = []
        for page in range(max_pages):
            query = urlencode({"limit": page_size, "offset": page * page_size})
            body = self._call("GET", f"/api/v1/cards/transactions?{query}", token=token)
            try:
                data = body.json()
                items, more = data["results"], data.get("next")
            except (ValueError, KeyError, TypeError):
                raise Unavailable("Gnosis Pay sent card transactions without results") from None
            if not isinstance(items, list):
                raise Unavailable("Gnosis Pay sent card transactions without results")
            for item in items:
                missing = [
                    f for f in PURCHASE_FIELDS if not isinstance(item, dict) or f not in item
                ]
                if missing:
                    raise Unavailable(
                        f"Gnosis Pay sent a card transaction without {', '.join(missing)}"
                    )
            results.extend(items)
            if not more or not items:
                return results
        raise Unavailable(f"Gnosis Pay has more than {max_pages * page_size} card transactions")
