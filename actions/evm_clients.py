"""The `evm` clients that actions use, configured from settings (`evm` itself reads none).

Each is instrumented here (`core.metrics.instrument_web3`): `evm` imports neither Django nor
the metrics, so the Django side wraps what it builds."""

from __future__ import annotations

from django.conf import settings
from web3 import Web3

from core import tracing
from core.metrics import instrument_web3
from evm.bundler import BundlerClient
from evm.relayer import Relayer
from evm.rpc import http_web3


def bundler_client(*, timeout: float | None = None) -> BundlerClient:
    """The bundler at BUNDLER_RPC_URL, read when called (tests point it elsewhere)."""
    client = BundlerClient(
        settings.BUNDLER_RPC_URL,
        timeout=timeout if timeout is not None else settings.BUNDLER_TIMEOUT_SECONDS,
        headers=tracing.outgoing_headers,  # each call a span of the trace in force
    )
    instrument_web3(client.w3, provider="bundler")
    return client


def chain_rpc(*, timeout: float) -> Web3:
    """web3 on CHAIN_RPC_URL, bounded by `timeout` (no silent retries)."""
    return instrument_web3(http_web3(settings.CHAIN_RPC_URL, timeout=timeout), provider="chain_rpc")


def card_relayer(*, timeout: float | None = None) -> Relayer:
    """The card relayer: pays gas for passkey-authorised card Safe transactions."""
    relayer = Relayer(
        rpc_url=settings.CHAIN_RPC_URL,
        key=settings.CARD_RELAYER_KEY,
        timeout=timeout or settings.GNOSIS_PAY_TIMEOUT_SECONDS,
    )
    instrument_web3(relayer.w3, provider="chain_rpc")
    return relayer
