"""The readiness checks of the chain this app writes to: its JSON-RPC node and the ERC-4337
bundler. ActionsConfig.ready() registers them into core.health."""

from __future__ import annotations

from django.conf import settings

from actions.chain_reads import CHAIN_RPC_ERRORS
from actions.evm_clients import bundler_client
from core.health import CheckFailed, register_check
from evm.bundler import BundlerError
from evm.rpc import http_web3
from evm.userops import UserOpError, entry_point_address


def check_chain_rpc(timeout: float) -> None:
    chain_id = http_web3(settings.CHAIN_RPC_URL, timeout=timeout).eth.chain_id
    if chain_id != settings.CHAIN_ID:
        raise CheckFailed(f"the node is on chain {chain_id}, CHAIN_ID is {settings.CHAIN_ID}")


def check_bundler(timeout: float) -> None:
    supported = bundler_client(timeout=timeout).supported_entry_points()
    wanted = entry_point_address(settings.ENTRY_POINT_VERSION)
    if not isinstance(supported, list) or wanted.lower() not in {
        str(address).lower() for address in supported
    }:
        raise CheckFailed(
            f"the bundler does not support the EntryPoint v{settings.ENTRY_POINT_VERSION}"
        )


def register() -> None:
    register_check("chain_rpc", check_chain_rpc, errors=CHAIN_RPC_ERRORS)
    register_check("bundler", check_bundler, errors=(BundlerError, UserOpError))
