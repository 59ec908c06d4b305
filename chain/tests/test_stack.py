"""The local chain stack: loopback only, and clear failures instead of hangs."""

from __future__ import annotations

import socket

import pytest

from chain.stack import ChainStackError, LocalChain, free_port, rpc

pytestmark = pytest.mark.chain


def _listeners(port: int) -> set[str]:
    """Local addresses listening on `port`, from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                address, port_hex = fields[1].rsplit(":", 1)
                if int(port_hex, 16) == port and fields[3] == "0A":  # LISTEN
                    found.add(address)
    return found


def test_the_stack_answers_and_binds_loopback_only(chain):
    assert rpc(chain.rpc_url, "eth_chainId") == hex(31337)
    assert rpc(chain.bundler_url, "eth_supportedEntryPoints") == [
        "0x0000000071727De22E5E9d8BAf0edAc6f37da032",
        "0x4337084D9E255Ff0702461CF8895CE9E3b5Ff108",
    ]
    for port in (chain.rpc_port, chain.bundler_port):
        listeners = _listeners(port)
        assert listeners, f"nothing listens on {port}"
        assert listeners <= {"0100007F"}, f"port {port} listens beyond loopback: {listeners}"


def test_the_world_runs_two_chains_with_the_same_contracts_at_the_same_addresses(
    chain_world, l2_chain
):
    from web3 import Web3

    from chain import contracts
    from chain.passkey_account import SoftwarePasskey
    from evm.passkey_account import PasskeyAccountClient

    card, l2 = chain_world.chains
    assert l2 is l2_chain
    assert (card.chain_id, l2.chain_id) == (31337, 31338)
    assert rpc(card.rpc_url, "eth_chainId") == hex(31337)
    assert rpc(l2.rpc_url, "eth_chainId") == hex(31338)
    assert rpc(l2.bundler_url, "eth_chainId") == hex(31338)
    assert rpc(l2.bundler_url, "eth_supportedEntryPoints") == rpc(
        card.bundler_url, "eth_supportedEntryPoints"
    )
    shared = [
        *(ep["address"] for ep in contracts.ENTRY_POINTS.values()),
        *(contracts.passkey_factory_address(v) for v in contracts.ENTRY_POINTS),
        *(contracts.demo_token_address(s) for s in contracts.DEMO_TOKENS),
        contracts.swap_router_address(),
    ]
    for address in shared:
        for local in (card, l2):
            assert rpc(local.rpc_url, "eth_getCode", [address, "latest"]) != "0x", (
                f"{address} missing on {local.chain_id}"
            )
    # The card's Safe lives on the card chain only.
    assert l2.card_contracts is False
    safe = contracts.create2_address(contracts.SAFE_SALT, contracts.safe_initcode("Safe"))
    assert rpc(card.rpc_url, "eth_getCode", [safe, "latest"]) != "0x"
    assert rpc(l2.rpc_url, "eth_getCode", [safe, "latest"]) == "0x"
    # One passkey, one counterfactual account address on both chains.
    qx, qy = SoftwarePasskey().public_xy
    addresses = {
        PasskeyAccountClient(Web3(Web3.HTTPProvider(local.rpc_url)), qx=qx, qy=qy).address
        for local in (card, l2)
    }
    assert len(addresses) == 1


def test_deploy_is_idempotent(chain):
    first = chain.deploy()
    assert chain.deploy() == first
    for address in first.values():
        assert rpc(chain.rpc_url, "eth_getCode", [address, "latest"]) != "0x"


def test_a_node_started_without_its_call_log_prints_no_call(chain, tmp_path):
    """`call_log=False` (the balances bench): the node answers as before and its log names no
    call; the session's node, with Hardhat's default, prints each one."""
    quiet = LocalChain(
        rpc_port=free_port(),
        bundler_port=free_port(),
        workdir=tmp_path,
        chain_id=31338,
        card_contracts=False,
        ens=False,
        call_log=False,
    )
    with quiet:
        logged = (tmp_path / "hardhat.log").read_text()
        for _ in range(3):
            assert rpc(quiet.rpc_url, "eth_blockNumber").startswith("0x")
        assert "eth_blockNumber" not in (tmp_path / "hardhat.log").read_text()[len(logged) :]
    rpc(chain.rpc_url, "eth_blockNumber")
    assert "eth_blockNumber" in (chain.workdir / "hardhat.log").read_text()


def test_a_taken_port_fails_fast_with_a_clear_message(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stack = LocalChain(rpc_port=port, bundler_port=free_port(), workdir=tmp_path)
        with pytest.raises(ChainStackError, match=f"port {port} on 127.0.0.1 is already in use"):
            stack.start()


def _refused() -> None:
    raise ConnectionRefusedError("nothing listens yet")


def test_a_server_that_dies_while_starting_reports_its_exit_code_and_log(tmp_path):
    stack = LocalChain(workdir=tmp_path)
    stack._spawn("broken", ["sh", "-c", "echo 'Error: cannot bind'; exit 3"])
    with pytest.raises(ChainStackError, match=r"(?s)broken exited with code 3.*cannot bind"):
        stack._wait("broken", _refused)
    stack.stop()


def test_a_server_that_never_answers_times_out_instead_of_hanging(tmp_path):
    stack = LocalChain(workdir=tmp_path, startup_timeout=1)
    stack._spawn("sleeper", ["sleep", "60"])
    with pytest.raises(ChainStackError, match=r"sleeper did not answer within 1s"):
        stack._wait("sleeper", _refused)
    stack.stop()
    assert stack._procs == []
