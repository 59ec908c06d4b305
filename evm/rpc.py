"""The one way a Web3 client on a JSON-RPC URL is built (the chain node, the bundler, the
relayer's node): bounded by a timeout, with or without web3's own retries, with headers
computed per request when asked (the caller's trace context)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from web3 import Web3


class _HTTPProvider(Web3.HTTPProvider):
    """web3's HTTP provider with headers computed per request (`headers()`), e.g. the caller's
    trace context, which changes from one call to the next on one client."""

    def __init__(self, *args: Any, headers: Callable[[], dict[str, str]], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._headers = headers

    def get_request_headers(self) -> dict[str, str]:
        return {**super().get_request_headers(), **self._headers()}


def http_web3(
    url: str,
    *,
    timeout: float,
    retries: bool = False,
    headers: Callable[[], dict[str, str]] | None = None,
) -> Web3:
    """Web3 on `url`, each request bounded by `timeout` seconds. Without `retries` a dropped
    connection is an error at once, so the timeout bounds the whole call; with them web3
    retries its idempotent methods a few times (reads where an agent can wait a little)."""
    kwargs: dict[str, Any] = {"request_kwargs": {"timeout": timeout}}
    if not retries:
        kwargs["exception_retry_configuration"] = None
    if headers is not None:
        return Web3(_HTTPProvider(url, headers=headers, **kwargs))
    return Web3(Web3.HTTPProvider(url, **kwargs))
