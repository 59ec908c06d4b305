"""get_balances over both local chains against the same call over one chain (its baseline),
both measured in this run on the real local world (two Hardhat/EDR nodes, chain ids 31337 and
31338, started here on free ports, or the running world $BENCH_LOCAL_WORLD names, see
bench/common.py) and a throwaway test database (SQLite by default; DATABASE_URL=postgres://…
for PostgreSQL).

    .venv/bin/python bench/balances.py [--accounts 3] [--rounds 10] [--requests 30] [--rtt-ms 0]
        [--node-log] [--profile N]

Generates its data: one user with `--accounts` passkey accounts (different salts), registered
on both chains, each holding the demo tokens (USDC, EURe, the svUSDC vault) minted there.
Each request is GET /api/v1/balances through the whole Django stack in this process (bearer
token, scope check, the view, the chain reads, the presenter; prices from a local CoinGecko-
shaped server, cached as in production). "one chain": settings.CHAINS is the card's chain
only; "two chains": both, one JSON-RPC batch (one `eth_call`) per chain, every batch written
before any answer is read, from the request's own thread. Rounds alternate which goes first.
Prints p50/p95 of each, the p50 of the CPU time the request's thread and the whole process
spent (equal when no other thread works for the request; the rest is waiting for the nodes and
for a core), and the p50 ratio (the target: at most 1.2x). `--profile N` then runs N calls
of each mode under cProfile and prints where each spends its own time.

The nodes this script starts do not print each call to their log (`--node-log`: they do, as
in `make run`): a hosted RPC prints nothing per call, and on this 2-core host the printing is
CPU the two nodes compete for (the ratio was about 0.05 higher with it).

`--rtt-ms N` puts a forwarding proxy in front of each node that holds every request N ms
before passing it on: the round trip a hosted RPC has (the local nodes answer in about 1.5 ms
of their own CPU, so on a busy 2-core machine the two nodes mostly wait for each other's
core rather than for the network).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    bench_agent,
    drop_database,
    machine,
    percentile,
    running_world,
    setup_django,
)


class DelayProxy:
    """A JSON-RPC forwarder on a free loopback port that adds `rtt` seconds to every request."""

    def __init__(self, target: str, rtt: float) -> None:
        import http.server
        import threading

        import requests

        session = requests.Session()
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out without a 40 ms stall

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(rtt)
                with lock:  # one upstream connection, kept alive
                    answer = session.post(
                        target, data=body, headers={"Content-Type": "application/json"}
                    )
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def make_data(*, accounts: int, world) -> str:
    """The user, their accounts on both chains with tokens minted, and a bearer token."""
    from web3 import Web3

    from actions.accounts.models import Passkey, SmartAccount, SmartAccountKind
    from chain import contracts
    from chain.dev import mint
    from chain.passkey_account import SoftwarePasskey
    from dev.demo.actions import ensure_demo_tokens
    from evm.passkey_account import PasskeyAccountClient

    ensure_demo_tokens()
    user, _application, token = bench_agent(scope="read:balances")
    qx, qy = SoftwarePasskey().public_xy
    passkey = Passkey.objects.create(
        user=user,
        credential_id="bench",
        public_key=b"\x00",
        public_key_x="0x" + qx.hex(),
        public_key_y="0x" + qy.hex(),
    )
    nodes = {local.chain_id: Web3(Web3.HTTPProvider(local.rpc_url)) for local in world.chains}
    for salt in range(accounts):
        client = PasskeyAccountClient(nodes[31337], qx, qy, salt=salt)
        for chain_id, w3 in nodes.items():
            SmartAccount.objects.create(
                user=user,
                kind=SmartAccountKind.PICNIC,
                chain_id=chain_id,
                address=client.address,
                entry_point_version="0.7",
                factory=client.factory.address,
                owner="passkey:bench",
                passkey=passkey,
                salt=salt,
            )
            for symbol, (_name, decimals, _salt) in contracts.DEMO_TOKENS.items():
                mint(w3, symbol, client.address, (salt + 1) * 10**decimals)
    return token.token


def profile(*, token: str, tables: dict, requests: int) -> None:
    """`requests` calls of each mode under cProfile: the functions where each spends its own
    time (tottime), top 12, so the difference between the modes can be read off."""
    import cProfile
    import pstats

    from django.conf import settings
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    for name, table in tables.items():
        settings.CHAINS = table
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(requests):
            client.get("/api/v1/balances")
        profiler.disable()
        print(f"\n--- {name}: {requests} calls under cProfile, by own time")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def measure(
    *, token: str, rounds: int, requests: int, tables: dict
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    """Wall time, this thread's and the process's CPU time of each request (ms), per mode."""
    from django.conf import settings
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    samples: dict[str, list[float]] = {name: [] for name in tables}
    cpu: dict[str, list[float]] = {name: [] for name in tables}
    process_cpu: dict[str, list[float]] = {name: [] for name in tables}

    def call(name: str) -> dict:
        settings.CHAINS = tables[name]
        response = client.get("/api/v1/balances")
        assert response.status_code == 200, response.content
        return response.json()

    for name in tables:  # warm, and check what each mode reads
        body = call(name)
        assert all(c["error"] is None for c in body["chains"]), body["chains"]
        assert {b["chainId"] for b in body["balances"]} == {c.id for c in tables[name]}
    names = list(tables)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            for _ in range(requests):
                started, began = time.perf_counter(), time.thread_time()
                process_began = time.process_time()
                call(name)
                samples[name].append((time.perf_counter() - started) * 1000)
                cpu[name].append((time.thread_time() - began) * 1000)
                process_cpu[name].append((time.process_time() - process_began) * 1000)
    return samples, cpu, process_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--accounts", type=int, default=3, help="passkey accounts per chain")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=30, help="per round and mode")
    parser.add_argument("--rtt-ms", type=float, default=0, help="added to every node request")
    parser.add_argument("--database", default="bench_balances", help="the throwaway database")
    parser.add_argument(
        "--node-log", action="store_true", help="the nodes print every call (Hardhat's default)"
    )
    parser.add_argument(
        "--profile", type=int, default=0, help="then N calls of each mode under cProfile"
    )
    args = parser.parse_args()

    print(machine())
    setup_django(args.database, sqlite=True)
    from django.conf import settings

    from chain.stack import LocalWorld, free_port
    from core.chains import get_chain, with_endpoints
    from dev.providers.local_coingecko import LocalCoinGeckoServer

    logging.disable(logging.WARNING)  # the access log of every request is not the measure
    settings.ALLOWED_HOSTS = ["*"]
    world = running_world()  # $BENCH_LOCAL_WORLD: already running (the smoke test's)
    own = world is None
    if own:
        world = LocalWorld.on_ports(
            card_rpc_port=free_port(),
            card_bundler_port=free_port(),
            l2_rpc_port=free_port(),
            l2_bundler_port=free_port(),
            workdir=Path(tempfile.mkdtemp(prefix="bench-balances-")),
            call_log=args.node_log,
        )
    started = time.monotonic()
    if own:
        world.start()
    prices = LocalCoinGeckoServer().start()
    proxies = []
    try:
        print(f"local world up in {time.monotonic() - started:.1f}s")
        settings.PRICE_API_URL = prices.url
        for local in world.chains:
            settings.CHAINS = with_endpoints(
                local.chain_id, rpc_url=local.rpc_url, bundler_url=local.bundler_url
            )
        settings.CARD_CHAIN_ID = world.card.chain_id
        token = make_data(accounts=args.accounts, world=world)
        if args.rtt_ms:
            for local in world.chains:
                proxies.append(DelayProxy(local.rpc_url, args.rtt_ms / 1000))
                settings.CHAINS = with_endpoints(local.chain_id, rpc_url=proxies[-1].url)
        both = tuple(settings.CHAINS)
        tables = {"one chain": (get_chain(world.card.chain_id),), "two chains": both}
        samples, cpu, process_cpu = measure(
            token=token, rounds=args.rounds, requests=args.requests, tables=tables
        )
        per_chain = args.accounts * 3  # USDC, EURe, svUSDC per account
        print(
            f"{args.accounts} accounts x 3 tokens per chain ({per_chain} balances a chain), "
            f"{args.rounds} rounds x {args.requests} requests per mode, "
            f"{args.rtt_ms:g} ms added to each node request"
        )
        for name, values in samples.items():
            print(
                f"{name:>10}: p50 {percentile(values, 50):6.2f} ms   "
                f"p95 {percentile(values, 95):6.2f} ms   this thread's CPU p50 "
                f"{percentile(cpu[name], 50):5.2f} ms, the process's "
                f"{percentile(process_cpu[name], 50):5.2f} ms   ({len(values)} requests)"
            )
        ratio = percentile(samples["two chains"], 50) / percentile(samples["one chain"], 50)
        print(f"two chains / one chain at p50: {ratio:.2f}x (target <= 1.2x)")
        if args.profile:
            profile(token=token, tables=tables, requests=args.profile)
    finally:
        for proxy in proxies:
            proxy.stop()
        prices.stop()
        if own:
            world.stop()
        drop_database()


if __name__ == "__main__":
    main()
