"""Swap quotes from LI.FI's HTTP API (`GET /v1/quote`), or anything speaking its shape.

A quote carries `action` (tokens, chains, amounts, slippage), `estimate` (`toAmount`,
`toAmountMin`, `approvalAddress`, `tool`) and `transactionRequest` (`to`, `data`, `value`,
`chainId`): the call the smart account makes after approving `approvalAddress`.
Errors come as `{"message": …, "code": …}` (e.g. 1002 "No available quotes").
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from core.http import JsonHttpClient, NotSent, OutcomeUnknown


class QuoteError(Exception):
    """No usable quote: the provider said no, or could not be reached; the message says which."""


@dataclass(frozen=True)
class SwapQuote:
    id: str
    tool: str
    from_chain_id: int
    to_chain_id: int
    from_token: dict[str, Any]
    to_token: dict[str, Any]
    from_amount: int
    to_amount: int
    to_amount_min: int
    approval_address: str
    tx_to: str
    tx_data: str
    tx_value: int
    tx_chain_id: int
    raw: dict[str, Any]

    def amount(self, units: int, token: dict[str, Any]) -> str:
        """Base units as a plain decimal string without trailing zeros ("9.154")."""
        return format(Decimal(units).scaleb(-int(token["decimals"])).normalize(), "f")


def _int(value: Any) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value, 16) if value.startswith("0x") else int(value)
    raise ValueError(f"not an integer: {value!r}")


def parse_quote(raw: Any) -> SwapQuote:
    try:
        action, estimate, tx = raw["action"], raw["estimate"], raw["transactionRequest"]
        return SwapQuote(
            id=str(raw.get("id") or ""),
            tool=str(estimate.get("tool") or raw.get("tool") or "unknown"),
            from_chain_id=_int(action["fromChainId"]),
            to_chain_id=_int(action["toChainId"]),
            from_token=action["fromToken"],
            to_token=action["toToken"],
            from_amount=_int(action["fromAmount"]),
            to_amount=_int(estimate["toAmount"]),
            to_amount_min=_int(estimate["toAmountMin"]),
            approval_address=str(estimate["approvalAddress"]),
            tx_to=str(tx["to"]),
            tx_data=str(tx["data"]),
            tx_value=_int(tx.get("value") or 0),
            tx_chain_id=_int(tx["chainId"]),
            raw=raw,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise QuoteError(f"the swap provider sent a quote we cannot read ({exc})") from None


class LifiClient:
    def __init__(self, base_url: str, *, timeout: float):
        self.http = JsonHttpClient(base_url, timeout=timeout, provider="lifi")

    def quote(
        self,
        *,
        from_chain: int,
        to_chain: int,
        from_token: str,
        to_token: str,
        from_amount: int,
        from_address: str,
        slippage_percent: Decimal,
        provider: str | None = None,
    ) -> SwapQuote:
        query = {
            "fromChain": from_chain,
            "toChain": to_chain,
            "fromToken": from_token,
            "toToken": to_token,
            "fromAmount": str(from_amount),
            "fromAddress": from_address,
            "toAddress": from_address,
            "slippage": str(slippage_percent / 100),
            "integrator": "picnic",
        }
        if provider:
            query["allowExchanges"] = provider
        try:
            answer = self.http.call("GET", f"/v1/quote?{urlencode(query)}")
        except (NotSent, OutcomeUnknown) as exc:
            raise QuoteError(f"the swap provider is unavailable: {exc}") from None
        try:
            body = answer.json()
        except ValueError:
            raise QuoteError(
                f"the swap provider answered HTTP {answer.status} without JSON"
            ) from None
        if answer.status != 200:
            message = body.get("message") if isinstance(body, dict) else None
            raise QuoteError(f"no swap quote: {message or f'HTTP {answer.status}'}")
        return parse_quote(body)
