"""The readiness checks of the chains this app writes to: for every chain of the table its
JSON-RPC node and its ERC-4337 bundler, each named for its chain. ActionsConfig.ready()
registers them into core.health (as a source: the table is read at each run).

The card's chain keeps the names `chain_rpc` and `bundler` and is required; another chain's
are `chain_rpc:<id>` and `bundler:<id>`, reported with their error but not required: taking
this instance out of the load balancer would not bring that chain back, and would stop the
card, the other chains, DMs and operations with it.
"""

from __future__ import annotations

from functools import partial

from django.conf import settings

from actions.chain_reads import CHAIN_RPC_ERRORS
from actions.evm_clients import bundler_client, chain_rpc
from core.chains import all_chains, get_chain
from core.health import CheckFailed, PlannedCheck, register_check_source
from evm.bundler import BundlerError
from evm.userops import UserOpError, entry_point_address


def check_chain_rpc(chain_id: int, timeout: float) -> None:
    answered = chain_rpc(chain_id, timeout=timeout).eth.chain_id
    if answered != chain_id:
        raise CheckFailed(
            f"the node of {get_chain(chain_id).name} is on chain {answered}, not {chain_id}"
        )


def check_bundler(chain_id: int, timeout: float) -> None:
    supported = bundler_client(chain_id, timeout=timeout).supported_entry_points()
    wanted = entry_point_address(settings.ENTRY_POINT_VERSION)
    if not isinstance(supported, list) or wanted.lower() not in {
        str(address).lower() for address in supported
    }:
        raise CheckFailed(
            f"the bundler does not support the EntryPoint v{settings.ENTRY_POINT_VERSION}"
        )


def chain_checks() -> list[PlannedCheck]:
    """A node and a bundler check for every chain of the table, the card's chain first."""
    chains = sorted(all_chains(), key=lambda c: c.id != settings.CARD_CHAIN_ID)
    planned = []
    kinds = (
        ("chain_rpc", check_chain_rpc, CHAIN_RPC_ERRORS),
        ("bundler", check_bundler, (BundlerError, UserOpError)),
    )
    for kind, check, errors in kinds:
        for chain in chains:
            if kind == "bundler" and not chain.bundler_url:
                continue  # a chain served for reads only
            card = chain.id == settings.CARD_CHAIN_ID
            planned.append(
                PlannedCheck(
                    name=kind if card else f"{kind}:{chain.id}",
                    check=partial(check, chain.id),
                    errors=errors,
                    chain=chain.name,
                    required=card,
                )
            )
    return planned


def register() -> None:
    register_check_source(chain_checks)
