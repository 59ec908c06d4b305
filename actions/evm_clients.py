"""The `evm` clients that actions use, configured from settings (`evm` itself reads none)."""

from __future__ import annotations

from django.conf import settings

from evm.bundler import BundlerClient
from evm.relayer import Relayer
from picnic import tracing


def bundler_client(*, timeout: float | None = None) -> BundlerClient:
    """The bundler at BUNDLER_RPC_URL, read when called (tests point it elsewhere)."""
    return BundlerClient(
        settings.BUNDLER_RPC_URL,
        timeout=timeout if timeout is not None else settings.BUNDLER_TIMEOUT_SECONDS,
        headers=tracing.outgoing_headers,  # each call a span of the trace in force
    )


def card_relayer(*, timeout: float | None = None) -> Relayer:
    """The card relayer: pays gas for passkey-authorised card Safe transactions."""
    return Relayer(
        rpc_url=settings.CHAIN_RPC_URL,
        key=settings.CARD_RELAYER_KEY,
        timeout=timeout or settings.GNOSIS_PAY_TIMEOUT_SECONDS,
    )
