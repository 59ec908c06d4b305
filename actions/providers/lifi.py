"""Swap quotes and bridge status from LI.FI's HTTP API (`GET /v1/quote`, `GET /v1/status`),
or anything speaking its shape.

A quote carries `action` (tokens, chains, amounts, slippage), `estimate` (`toAmount`,
`toAmountMin`, `approvalAddress`, `tool`) and `transactionRequest` (`to`, `data`, `value`,
`chainId`): the call the smart account makes after approving `approvalAddress`.
Errors come as `{"message": …, "code": …}` (e.g. 1002 "No available quotes").

A cross-chain quote is a bridge: its source transaction runs on `fromChain`, and the bridge
delivers on `toChain` later. `/v1/status` follows it in LI.FI's vocabulary: `status` NOT_FOUND /
INVALID / PENDING / DONE / FAILED, a `substatus` (WAIT_SOURCE_CONFIRMATIONS,
WAIT_DESTINATION_TRANSACTION, BRIDGE_NOT_AVAILABLE, CHAIN_NOT_AVAILABLE while PENDING;
COMPLETED, PARTIAL, REFUNDED once DONE), and the `sending` and `receiving` transactions.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.conf import settings

from core.http import JsonHttpClient, NotSent, OutcomeUnknown


class QuoteError(Exception):
    """No usable quote: the provider said no, or could not be reached; the message says which."""


class ProviderUnavailable(QuoteError):
    """LI.FI could not be reached or answered 5xx (an outage, not a refusal of the request)."""


# LI.FI's `status` values; the last two are final.
BRIDGE_STATUSES = ("NOT_FOUND", "INVALID", "PENDING", "DONE", "FAILED")
BRIDGE_FINAL = ("DONE", "FAILED")


@dataclass(frozen=True)
class BridgeStatus:
    """One `/v1/status` answer: LI.FI's words, and the receiving side once there is one."""

    status: str
    substatus: str
    message: str
    sending_tx_hash: str
    receiving_tx_hash: str
    receiving_chain_id: int | None
    receiving_amount: int | None
    receiving_token: dict[str, Any]
    raw: dict[str, Any]

    @property
    def final(self) -> bool:
        return self.status in BRIDGE_FINAL


def parse_status(raw: Any) -> BridgeStatus:
    try:
        status = str(raw["status"])
        if status not in BRIDGE_STATUSES:
            raise ValueError(f"unknown status {status!r}")
        sending = raw.get("sending") or {}
        receiving = raw.get("receiving") or {}
        if not isinstance(sending, dict) or not isinstance(receiving, dict):
            raise ValueError("sending/receiving are not objects")
        amount = receiving.get("amount")
        chain = receiving.get("chainId")
        token = receiving.get("token") or {}
        return BridgeStatus(
            status=status,
            substatus=str(raw.get("substatus") or ""),
            message=str(raw.get("substatusMessage") or ""),
            sending_tx_hash=str(sending.get("txHash") or ""),
            receiving_tx_hash=str(receiving.get("txHash") or ""),
            receiving_chain_id=None if chain is None else _int(chain),
            receiving_amount=None if amount in (None, "") else _int(amount),
            receiving_token=token if isinstance(token, dict) else {},
            raw=raw,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise QuoteError(f"the bridge status could not be read ({exc})") from None


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
        return parse_quote(self._get(f"/v1/quote?{urlencode(query)}", refused="no swap quote"))

    def status(
        self, *, tx_hash: str, from_chain: int, to_chain: int, bridge: str = ""
    ) -> BridgeStatus:
        """Where a bridge transfer is, by its source transaction."""
        query = {"txHash": tx_hash, "fromChain": from_chain, "toChain": to_chain}
        if bridge:
            query["bridge"] = bridge
        return parse_status(self._get(f"/v1/status?{urlencode(query)}", refused="no bridge status"))

    def _get(self, path: str, *, refused: str) -> Any:
        try:
            answer = self.http.call("GET", path)
        except (NotSent, OutcomeUnknown) as exc:
            raise ProviderUnavailable(f"the swap provider is unavailable: {exc}") from None
        try:
            body = answer.json()
        except ValueError:
            error = ProviderUnavailable if answer.status >= 500 else QuoteError
            raise error(f"the swap provider answered HTTP {answer.status} without JSON") from None
        if answer.status != 200:
            message = body.get("message") if isinstance(body, dict) else None
            if answer.status >= 500:
                raise ProviderUnavailable(
                    f"the swap provider is unavailable: {message or ''} (HTTP {answer.status})"
                )
            raise QuoteError(f"{refused}: {message or f'HTTP {answer.status}'}")
        return body


def lifi_client() -> LifiClient:
    """The client of the configured quote and bridge provider (SWAP_QUOTE_URL), for every room
    that asks it: a swap's quote, a permission's pair, a bridge leg's status."""
    return LifiClient(settings.SWAP_QUOTE_URL, timeout=settings.SWAP_QUOTE_TIMEOUT_SECONDS)
