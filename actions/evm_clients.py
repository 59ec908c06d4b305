"""The `evm` clients that actions use, one per chain of the table (core.chains), configured
from settings (`evm` itself reads none).

Every client is asked for by chain id: the chain comes from the thing in hand (the action, the
asset's CAIP-19 id, the account row), never from a global. Each is instrumented here
(`core.metrics.instrument_web3`): `evm` imports neither Django nor the metrics, so the Django
side wraps what it builds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from django.conf import settings
from eth_abi.exceptions import DecodingError
from web3 import Web3
from web3.exceptions import Web3Exception

from core import tracing
from core.chains import Chain, get_chain
from core.metrics import instrument_web3
from evm.bundler import BundlerClient, BundlerError, BundlerUnavailable
from evm.relayer import Relayer
from evm.rpc import http_web3

# What a node that is down, slow or answering garbage raises through web3 and requests:
# refused or timed-out connections, HTTP errors, JSON-RPC errors, undecodable answers.
NODE_ERRORS = (
    requests.RequestException,
    OSError,
    Web3Exception,
    json.JSONDecodeError,
    DecodingError,
)


class ChainUnavailable(Exception):
    """One chain's node (or bundler) did not answer usably. Carries the chain, so every error
    the user or agent reads names it; the other chains are not concerned."""

    def __init__(self, chain: Chain, cause: Exception, *, part: str = "node") -> None:
        super().__init__(f"{chain.name} ({part}): {cause!r}")
        self.chain = chain
        self.cause = cause
        self.part = part  # "node" or "bundler"


@contextmanager
def on_chain(chain: Chain) -> Iterator[None]:
    """Around the network calls of one chain: a failing node or bundler is raised as
    ChainUnavailable naming that chain. Anything else (a bug, a refused input) propagates."""
    try:
        yield
    except ChainUnavailable:
        raise
    except BundlerError as exc:
        raise ChainUnavailable(chain, exc, part="bundler") from exc
    except NODE_ERRORS as exc:
        raise ChainUnavailable(chain, exc) from exc


def bundler_client(chain_id: int, *, timeout: float | None = None) -> BundlerClient:
    """The bundler of this chain, read from the table when called (tests point it elsewhere)."""
    chain = get_chain(chain_id)
    if not chain.bundler_url:
        raise BundlerUnavailable(f"{chain.name} has no bundler configured")
    client = BundlerClient(
        chain.bundler_url,
        timeout=timeout if timeout is not None else settings.BUNDLER_TIMEOUT_SECONDS,
        headers=tracing.outgoing_headers,  # each call a span of the trace in force
    )
    instrument_web3(client.w3, provider="bundler")
    return client


def chain_rpc(chain_id: int, *, timeout: float) -> Web3:
    """web3 on this chain's node, bounded by `timeout` (no silent retries)."""
    return instrument_web3(
        http_web3(get_chain(chain_id).rpc_url, timeout=timeout), provider="chain_rpc"
    )


def card_relayer(chain_id: int, *, timeout: float | None = None) -> Relayer:
    """The card relayer on the card's chain: pays gas for passkey-authorised card Safe
    transactions."""
    relayer = Relayer(
        rpc_url=get_chain(chain_id).rpc_url,
        key=settings.CARD_RELAYER_KEY,
        timeout=timeout or settings.GNOSIS_PAY_TIMEOUT_SECONDS,
    )
    instrument_web3(relayer.w3, provider="chain_rpc")
    return relayer


def tool_web3(chain_id: int) -> Web3:
    """web3 on the chain of the thing in hand (the asset, the card), each call bounded as a
    read tool's are: an agent waits for the proposal."""
    timeout = settings.CHAIN_READ_TIMEOUT_SECONDS
    w3 = http_web3(get_chain(chain_id).rpc_url, timeout=timeout, retries=True)
    return instrument_web3(w3, provider="chain_rpc")
