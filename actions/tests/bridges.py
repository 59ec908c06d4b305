"""What the cross-chain swap tests share (over the API, in Chromium, over MCP): the local LI.FI
server over both local chains and the beat's reconciliation until the
bridge leg ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from actions.bridges.models import BridgeLeg
from actions.bridges.services import bridges_reconcile_pending
from dev.providers.local_lifi import LocalLifiServer
from dev.testing import wait_until


@contextmanager
def local_bridge(chain_world, settings, *, bridge_delay: float) -> Iterator[LocalLifiServer]:
    """The local LI.FI server over both chains, its relayer delivering `bridge_delay` seconds
    after it sees the source transaction; our side polls /status every 0.2 s (at most 1 s
    apart)."""
    rpc_urls = {local.chain_id: local.rpc_url for local in chain_world.chains}
    with LocalLifiServer(rpc_urls=rpc_urls, bridge_delay=bridge_delay, tick_seconds=0.1) as server:
        settings.SWAP_QUOTE_URL = server.url
        settings.SWAP_QUOTE_TIMEOUT_SECONDS = 5.0
        settings.BRIDGE_POLL_SECONDS = 0.2
        settings.BRIDGE_POLL_MAX_SECONDS = 1.0
        yield server


def leg_settles(action) -> BridgeLeg:
    """The beat's work, done here: poll the bridge until the action's leg has ended."""

    def finished():
        bridges_reconcile_pending()
        leg = BridgeLeg.objects.get(action=action)
        return leg if leg.finished else None

    return wait_until(finished, timeout=60, interval=0.3)
