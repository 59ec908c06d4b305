"""Fiat prices from an API speaking CoinGecko's `GET /api/v3/simple/price` shape:
`?ids=usd-coin,monerium-eur-money&vs_currencies=usd,eur,brl` → `{"usd-coin": {"usd": 1.0, …}}`.

Prices are cached briefly; a source that is down, slow or answers garbage yields no prices (and
says why), never a made-up number."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from urllib.parse import urlencode

from django.conf import settings
from django.core.cache import cache

from core.http import JsonHttpClient, NotSent, OutcomeUnknown, problem_reason

FIAT = ("USD", "EUR", "BRL")


class PriceError(Exception):
    pass


def prices(ids: list[str]) -> dict[str, dict[str, Decimal]]:
    """{price id: {"USD": Decimal, "EUR": …, "BRL": …}} for every id; raises PriceError."""
    ids = sorted(set(ids))
    if not ids:
        return {}
    key = "prices:" + ",".join(ids)
    cached = cache.get(key)
    if cached is not None:
        return cached
    client = JsonHttpClient(
        settings.PRICE_API_URL, timeout=settings.PRICE_API_TIMEOUT_SECONDS, provider="prices"
    )
    query = urlencode({"ids": ",".join(ids), "vs_currencies": ",".join(c.lower() for c in FIAT)})
    headers = {"Accept": "application/json"}
    if settings.PRICE_API_KEY:
        headers["x-cg-pro-api-key"] = settings.PRICE_API_KEY
    try:
        answer = client.call("GET", f"/api/v3/simple/price?{query}", headers=headers)
    except (NotSent, OutcomeUnknown) as exc:
        raise PriceError(f"price source unavailable: {exc}") from None
    if answer.status != 200:
        reason, _ = problem_reason(answer)
        raise PriceError(f"price source answered {answer.status}: {reason}")
    try:
        body = answer.json()
        result = {pid: {c: Decimal(str(body[pid][c.lower()])) for c in FIAT} for pid in ids}
    except (ValueError, KeyError, TypeError, InvalidOperation):
        raise PriceError("price source answered without a price for every token") from None
    if any(not v.is_finite() or v < 0 for p in result.values() for v in p.values()):
        raise PriceError("price source answered an impossible price")
    cache.set(key, result, settings.PRICE_CACHE_SECONDS)
    return result
