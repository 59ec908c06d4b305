"""A local swap-and-bridge server speaking LI.FI's `GET /v1/quote` and `GET /v1/status`
shapes, for tests and `make run`.

Same-chain quotes go through DemoSwapRouter (fixed rates), with its real `transactionRequest`.
Cross-chain quotes (fromChain ≠ toChain, both local chains) are a bridge: the
`transactionRequest` is the source token's `transfer` to the bridge's escrow, an EOA this
server holds the key of (the relayer, a Hardhat dev key); no approval is needed, so
`approvalAddress` is the zero address. A watcher thread reads the escrow's incoming Transfer
logs on every chain; each one that matches a quote is a bridge transfer, which the relayer
settles `bridge_delay` seconds later on the destination chain by sending the destination token
from its own balance (minted to it by the demo tokens' owner when short).

`/v1/status?txHash=…&fromChain=…&toChain=…&bridge=…` answers in LI.FI's vocabulary: `status`
NOT_FOUND / INVALID / PENDING / DONE / FAILED, `substatus` WAIT_SOURCE_CONFIRMATIONS,
WAIT_DESTINATION_TRANSACTION, BRIDGE_NOT_AVAILABLE, CHAIN_NOT_AVAILABLE (PENDING) and
COMPLETED / PARTIAL / REFUNDED (DONE), with `sending` and `receiving`.

Faults, set as attributes (tests) or with `POST /admin/faults` (a JSON object of the same
names, for `make run`):
- `mode` (every endpoint): `ok`, `error` (500), `unavailable` (503), `hang`, `drop`.
- `bridge_mode` (what the bridge does with a transfer it sees from now on): `complete`;
  `partial` (delivers another token, LI.FI's PARTIAL); `refund` (sends the source token back
  on the source chain: REFUNDED); `fail` (FAILED, nothing delivered); `never` (PENDING
  forever); `paused` (PENDING, BRIDGE_NOT_AVAILABLE, until the mode changes).
- `bridge_delay` (seconds before delivery) and `rpc_urls` (a chain pointed at a dead port is
  a destination chain that is down: PENDING, CHAIN_NOT_AVAILABLE, retried every tick).

    python -m dev.providers.local_lifi --port 8789 --rpc 31337=http://127.0.0.1:8545 \
        --rpc 31338=http://127.0.0.1:8546
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

from eth_abi import encode
from eth_account import Account
from eth_utils import function_signature_to_4byte_selector
from web3 import Web3

from chain import contracts
from chain.dev import mint
from chain.stack import DEV_KEYS
from dev.local_server import LocalJsonServer

logger = logging.getLogger(__name__)

SWAP = function_signature_to_4byte_selector("swap(address,address,uint256,uint256,address)")
TRANSFER = function_signature_to_4byte_selector("transfer(address,uint256)")
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
ZERO_ADDRESS = "0x" + "00" * 20
# The bridge's relayer and escrow: Hardhat dev account #6 (the local chains fund it).
RELAYER_KEY = DEV_KEYS[6]
BRIDGE_TOOL = "demo-bridge"
# The bridge keeps this share of what it carries (0.6%: 100 EURe arrive as 99.4 EURe).
BRIDGE_FEE = Decimal("0.006")
MODES = ("ok", "error", "unavailable", "hang", "drop")
BRIDGE_MODES = ("complete", "partial", "refund", "fail", "never", "paused")
NO_QUOTE = {"message": "No available quotes for the requested transfer", "code": 1002}


_ERC20_ABI = [
    {
        "type": "function",
        "name": name,
        "stateMutability": mutability,
        "inputs": [{"name": n, "type": t} for n, t in inputs],
        "outputs": [{"name": "", "type": out}],
    }
    for name, mutability, inputs, out in (
        ("transfer", "nonpayable", [("to", "address"), ("amount", "uint256")], "bool"),
        ("balanceOf", "view", [("owner", "address")], "uint256"),
        ("symbol", "view", [], "string"),
    )
]


def _tokens(chain_id: int) -> dict[str, dict]:
    return {
        contracts.demo_token_address(symbol).lower(): {
            "address": contracts.demo_token_address(symbol),
            "chainId": chain_id,
            "symbol": symbol,
            "decimals": decimals,
            "name": name,
            "priceUSD": "1.00" if symbol == "USDC" else "1.08",
        }
        for symbol, (name, decimals, _salt) in contracts.DEMO_TOKENS.items()
    }


def _token_by_symbol(chain_id: int, symbol: str) -> dict:
    return next(t for t in _tokens(chain_id).values() if t["symbol"] == symbol)


def _converted(amount: int, from_symbol: str, to_symbol: str) -> int:
    """`amount` of one demo token in another at the demo DEX's rates (1:1 for the same)."""
    if from_symbol == to_symbol:
        return amount
    return amount * contracts.DEMO_RATES[(from_symbol, to_symbol)] // 10**18


@dataclass
class BridgeTransfer:
    """One source transaction the bridge saw, and what it did about it."""

    quote: dict
    tx_hash: str
    amount: int
    seen_at: float
    mode: str
    status: str = "PENDING"
    substatus: str = "WAIT_DESTINATION_TRANSACTION"
    message: str = "The bridge is waiting to send the tokens on the destination chain."
    receiving: dict = field(default_factory=dict)
    done_at: float | None = None


class LocalLifiServer(LocalJsonServer):
    def __init__(
        self,
        *,
        port: int = 0,
        chain_id: int = 31337,
        mode: str = "ok",
        rpc_urls: dict[int, str] | None = None,
        bridge_mode: str = "complete",
        bridge_delay: float = 1.0,
        tick_seconds: float = 0.25,
    ):
        super().__init__(port=port)
        self.chain_id = chain_id
        self.mode = mode
        # Without RPC URLs the server quotes same-chain swaps on `chain_id` only (no bridge).
        self.rpc_urls = dict(rpc_urls or {})
        self.bridge_mode = bridge_mode
        self.bridge_delay = bridge_delay
        self.tick_seconds = tick_seconds
        self.requests: list[dict[str, str]] = []
        self.quotes: dict[str, dict] = {}
        self.transfers: dict[str, BridgeTransfer] = {}
        self._lock = threading.RLock()
        self._next_block: dict[int, int] = {}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="lifi-bridge")

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def chains(self) -> set[int]:
        return set(self.rpc_urls) or {self.chain_id}

    @property
    def escrow(self) -> str:
        return Account.from_key(RELAYER_KEY).address

    def start(self):
        super().start()
        if self.rpc_urls:
            self._watcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        super().stop()

    # --- HTTP ---------------------------------------------------------------------------------

    def _fault(self, handler) -> bool:
        """Answer per the availability mode; True when it did (the route must not)."""
        if self.mode == "hang":
            self.hang()
        elif self.mode == "drop":
            self.drop(handler)
        elif self.mode == "error":
            self.send_json(handler, 500, {"message": "Internal server error", "code": 1000})
        elif self.mode == "unavailable":
            self.send_json(
                handler, 503, {"message": "Service temporarily unavailable", "code": 1000}
            )
        else:
            return False
        return True

    def on_get(self, handler) -> None:
        url = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append(query)
        if url.path not in ("/v1/quote", "/v1/status"):
            return self.send_json(handler, 404, {"message": "Not found", "code": 1000})
        if self._fault(handler):
            return None
        if url.path == "/v1/status":
            return self._status(handler, query)
        return self._quote(handler, query)

    def on_post(self, handler) -> None:
        if urlsplit(handler.path).path != "/admin/faults":
            return self.send_json(handler, 404, {"message": "Not found", "code": 1000})
        try:
            body = json.loads(self.read_body(handler) or b"{}")
            self.set_faults(**body)
        except (ValueError, TypeError) as exc:
            return self.send_json(handler, 400, {"message": str(exc), "code": 1000})
        return self.send_json(handler, 200, self.faults())

    def set_faults(self, **values: Any) -> None:
        for name, value in values.items():
            if name == "mode" and value not in MODES:
                raise ValueError(f"mode must be one of {MODES}")
            if name == "bridge_mode" and value not in BRIDGE_MODES:
                raise ValueError(f"bridge_mode must be one of {BRIDGE_MODES}")
            if name == "bridge_delay":
                value = float(value)
            if name == "rpc_urls":
                value = {int(k): str(v) for k, v in value.items()}
            if name not in ("mode", "bridge_mode", "bridge_delay", "rpc_urls"):
                raise ValueError(f"unknown fault setting {name!r}")
            setattr(self, name, value)

    def faults(self) -> dict:
        return {
            "mode": self.mode,
            "bridge_mode": self.bridge_mode,
            "bridge_delay": self.bridge_delay,
            "rpc_urls": {str(k): v for k, v in self.rpc_urls.items()},
        }

    # --- /v1/quote ----------------------------------------------------------------------------

    def _quote(self, handler, query: dict[str, str]) -> None:
        try:
            from_chain, to_chain = int(query["fromChain"]), int(query["toChain"])
            amount = int(query["fromAmount"])
            slippage = Decimal(query.get("slippage", "0.005"))
            from_token = _tokens(from_chain)[query["fromToken"].lower()]
            to_token = _tokens(to_chain)[query["toToken"].lower()]
            from_address, to_address = query["fromAddress"], query.get("toAddress") or ""
        except (KeyError, ValueError, ArithmeticError):
            return self.send_json(handler, 404, NO_QUOTE)
        if from_chain not in self.chains or to_chain not in self.chains or amount <= 0:
            return self.send_json(handler, 404, NO_QUOTE)
        to_address = to_address or from_address
        if from_chain == to_chain:
            if from_token["symbol"] == to_token["symbol"]:
                return self.send_json(handler, 404, NO_QUOTE)
            to_amount = _converted(amount, from_token["symbol"], to_token["symbol"])
            to_min = int(Decimal(to_amount) * (1 - slippage))
            router = contracts.swap_router_address()
            data = SWAP + encode(
                ["address", "address", "uint256", "uint256", "address"],
                [from_token["address"], to_token["address"], amount, to_min, to_address],
            )
            tool, name, approval, tx_to, duration = "demo-dex", "Demo DEX", router, router, 15
        else:
            converted = _converted(amount, from_token["symbol"], to_token["symbol"])
            to_amount = int(Decimal(converted) * (1 - BRIDGE_FEE))
            to_min = int(Decimal(to_amount) * (1 - slippage))
            # The tokens go to the escrow in the source transaction itself: nothing to approve.
            data = TRANSFER + encode(["address", "uint256"], [self.escrow, amount])
            tool, name, approval, tx_to = BRIDGE_TOOL, "Demo Bridge", ZERO_ADDRESS, None
            tx_to = from_token["address"]
            duration = max(int(self.bridge_delay), 1)
        quote_id = str(uuid.uuid4())
        step = {
            "type": "lifi",
            "id": quote_id,
            "tool": tool,
            "toolDetails": {"key": tool, "name": name, "logoURI": ""},
            "action": {
                "fromChainId": from_chain,
                "toChainId": to_chain,
                "fromToken": from_token,
                "toToken": to_token,
                "fromAmount": str(amount),
                "slippage": float(slippage),
                "fromAddress": from_address,
                "toAddress": to_address,
            },
            "estimate": {
                "tool": tool,
                "approvalAddress": approval,
                "fromAmount": str(amount),
                "toAmount": str(to_amount),
                "toAmountMin": str(to_min),
                "executionDuration": duration,
                "feeCosts": [],
                "gasCosts": [],
            },
        }
        body = {
            **step,
            "includedSteps": [{**step, "type": "cross" if from_chain != to_chain else "swap"}],
            "transactionRequest": {
                "to": tx_to,
                "data": "0x" + data.hex(),
                "value": "0x0",
                "from": from_address,
                "chainId": from_chain,
                "gasLimit": hex(300_000),
            },
        }
        if from_chain != to_chain:
            with self._lock:
                self.quotes[quote_id] = body
        return self.send_json(handler, 200, body)

    # --- /v1/status ---------------------------------------------------------------------------

    def _status(self, handler, query: dict[str, str]) -> None:
        tx_hash = (query.get("txHash") or "").lower()
        if len(tx_hash) != 66 or not tx_hash.startswith("0x"):
            return self.send_json(
                handler, 400, {"message": "Invalid transaction hash", "code": 1011}
            )
        with self._lock:
            transfer = self.transfers.get(tx_hash)
        if transfer is None:
            try:
                from_chain = int(query.get("fromChain") or 0)
            except ValueError:
                from_chain = 0
            transfer, status = self._look_up(tx_hash, from_chain)
            if transfer is None:
                return self.send_json(handler, 200, {"status": status, "transactionId": tx_hash})
        return self.send_json(handler, 200, self._status_body(transfer))

    def _look_up(self, tx_hash: str, from_chain: int) -> tuple[BridgeTransfer | None, str]:
        """A hash the watcher has not seen (yet): ask the source chain."""
        url = self.rpc_urls.get(from_chain)
        if not url:
            return None, "NOT_FOUND"
        try:
            w3 = self._w3(url)
            receipt = w3.eth.get_transaction_receipt(tx_hash)
        except Exception as exc:  # noqa: BLE001 - not mined, unknown or the chain unreachable
            logger.debug("status %s: %r", tx_hash, exc)
            return None, "NOT_FOUND"
        self._scan_logs(from_chain, receipt["logs"])
        with self._lock:
            transfer = self.transfers.get(tx_hash)
        return transfer, "INVALID"

    def _status_body(self, transfer: BridgeTransfer) -> dict:
        quote = transfer.quote
        action = quote["action"]
        sending = {
            "txHash": transfer.tx_hash,
            "txLink": "",
            "amount": str(transfer.amount),
            "token": action["fromToken"],
            "chainId": action["fromChainId"],
            "timestamp": int(transfer.seen_at),
        }
        receiving = transfer.receiving or {"chainId": action["toChainId"]}
        return {
            "transactionId": quote["id"],
            "sending": sending,
            "receiving": receiving,
            "lifiExplorerLink": "",
            "fromAddress": action["fromAddress"],
            "toAddress": action["toAddress"],
            "tool": quote["tool"],
            "status": transfer.status,
            "substatus": transfer.substatus,
            "substatusMessage": transfer.message,
            "metadata": {"integrator": "picnic"},
        }

    # --- the bridge ---------------------------------------------------------------------------

    @staticmethod
    def _w3(url: str):
        return Web3(
            Web3.HTTPProvider(
                url, request_kwargs={"timeout": 2}, exception_retry_configuration=None
            )
        )

    def _watch(self) -> None:
        while not self._stop.wait(self.tick_seconds):
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the watcher must outlive any one bad tick
                logger.exception("local bridge tick failed")

    def tick(self) -> None:
        """One round: read new escrow transfers on every chain, settle what is due."""
        escrow_topic = "0x" + "00" * 12 + self.escrow.lower()[2:]
        for chain_id, url in list(self.rpc_urls.items()):
            try:
                w3 = self._w3(url)
                head = w3.eth.block_number
                start = self._next_block.setdefault(chain_id, head)
                if start > head:
                    continue
                logs = w3.eth.get_logs(
                    {
                        "fromBlock": start,
                        "toBlock": head,
                        "topics": [TRANSFER_TOPIC, None, escrow_topic],
                    }
                )
            except Exception as exc:  # noqa: BLE001 - a chain that is down is read next tick
                logger.debug("bridge watcher: chain %s not read: %r", chain_id, exc)
                continue
            self._scan_logs(chain_id, logs)
            self._next_block[chain_id] = head + 1
        with self._lock:
            due = [t for t in self.transfers.values() if t.status == "PENDING"]
        for transfer in due:
            self._settle(transfer)

    def _scan_logs(self, chain_id: int, logs) -> None:
        """Each Transfer to the escrow that matches an open quote is a bridge transfer."""
        escrow = self.escrow.lower()
        for log in logs:
            topics = [bytes(t).hex() if not isinstance(t, str) else t for t in log["topics"]]
            topics = [t if t.startswith("0x") else "0x" + t for t in topics]
            if len(topics) != 3 or topics[0] != TRANSFER_TOPIC:
                continue
            if "0x" + topics[2][-40:] != escrow:
                continue
            sender = "0x" + topics[1][-40:]
            data = log["data"]
            amount = int(data.hex() if isinstance(data, bytes) else data[2:] or "0", 16)
            tx = log["transactionHash"]
            tx_hash = (tx if isinstance(tx, str) else "0x" + bytes(tx).hex()).lower()
            if not tx_hash.startswith("0x"):
                tx_hash = "0x" + tx_hash
            token = str(log["address"]).lower()
            with self._lock:
                if tx_hash in self.transfers:
                    continue
                quote = next(
                    (
                        q
                        for q in self.quotes.values()
                        if q["action"]["fromChainId"] == chain_id
                        and q["action"]["fromToken"]["address"].lower() == token
                        and q["action"]["fromAddress"].lower() == sender
                        and int(q["action"]["fromAmount"]) == amount
                    ),
                    None,
                )
                if quote is None:
                    continue  # liquidity or a stray transfer: not ours to bridge
                del self.quotes[quote["id"]]
                self.transfers[tx_hash] = BridgeTransfer(
                    quote=quote,
                    tx_hash=tx_hash,
                    amount=amount,
                    seen_at=time.time(),
                    mode=self.bridge_mode,
                )

    def _settle(self, transfer: BridgeTransfer) -> None:
        mode = transfer.mode
        if mode == "paused" and self.bridge_mode == "paused":
            transfer.substatus = "BRIDGE_NOT_AVAILABLE"
            transfer.message = "The bridge is paused; the transfer waits for it."
            return
        if mode == "paused":
            transfer.mode = mode = self.bridge_mode
        if mode == "never" or time.time() < transfer.seen_at + self.bridge_delay:
            return
        action = transfer.quote["action"]
        to_chain, from_chain = action["toChainId"], action["fromChainId"]
        if mode == "fail":
            transfer.status, transfer.substatus = "FAILED", "NOT_PROCESSABLE_REFUND_NEEDED"
            transfer.message = "The transfer cannot be completed; a refund is required."
            transfer.done_at = time.time()
            return
        if mode == "refund":
            chain_id, token, amount = from_chain, action["fromToken"], transfer.amount
            substatus = "REFUNDED"
            message = "The tokens were refunded to the sender on the source chain."
        elif mode == "partial":
            # Another token than asked for: the one that was sent, or the other demo token.
            wanted = action["toToken"]["symbol"]
            symbol = action["fromToken"]["symbol"]
            if symbol == wanted:
                symbol = next(s for s in contracts.DEMO_TOKENS if s != wanted)
            chain_id, token = to_chain, _token_by_symbol(to_chain, symbol)
            converted = _converted(transfer.amount, action["fromToken"]["symbol"], symbol)
            amount = int(Decimal(converted) * (1 - BRIDGE_FEE))
            substatus = "PARTIAL"
            message = "The bridge delivered another token than requested."
        else:
            chain_id, token = to_chain, action["toToken"]
            amount = int(transfer.quote["estimate"]["toAmount"])
            substatus = "COMPLETED"
            message = "The transfer is complete."
        receiver = action["fromAddress"] if mode == "refund" else action["toAddress"]
        try:
            tx_hash = self._send(chain_id, token["address"], receiver, amount)
        except Exception as exc:  # noqa: BLE001 - the chain is down: say so, retry next tick
            logger.info("bridge delivery on chain %s failed: %r", chain_id, exc)
            transfer.substatus = "CHAIN_NOT_AVAILABLE"
            transfer.message = f"Chain {chain_id} is not available; the bridge retries."
            return
        transfer.receiving = {
            "txHash": tx_hash,
            "txLink": "",
            "amount": str(amount),
            "token": token,
            "chainId": chain_id,
            "timestamp": int(time.time()),
        }
        transfer.status, transfer.substatus, transfer.message = "DONE", substatus, message
        transfer.done_at = time.time()

    def _send(self, chain_id: int, token: str, to: str, amount: int) -> str:
        """The relayer sends `amount` of `token` to `to`, minting itself what it lacks."""
        w3 = self._w3(self.rpc_urls[chain_id])
        erc20 = w3.eth.contract(address=Web3.to_checksum_address(token), abi=_ERC20_ABI)
        relayer = w3.eth.account.from_key(RELAYER_KEY)
        if erc20.functions.balanceOf(relayer.address).call() < amount:
            symbol = erc20.functions.symbol().call()
            mint(w3, symbol, relayer.address, amount + 1_000_000 * 10**6)
        tx = erc20.functions.transfer(Web3.to_checksum_address(to), amount).build_transaction(
            {
                "from": relayer.address,
                "nonce": w3.eth.get_transaction_count(relayer.address, "pending"),
                "chainId": chain_id,
            }
        )
        tx_hash = w3.eth.send_raw_transaction(relayer.sign_transaction(tx).raw_transaction)
        receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30)
        if receipt["status"] != 1:
            raise RuntimeError(f"the relayer's transfer reverted: {tx_hash.hex()}")
        return "0x" + bytes(tx_hash).hex().removeprefix("0x")


def main() -> None:
    parser = argparse.ArgumentParser(description="Local LI.FI-shaped quote and bridge server")
    parser.add_argument("--port", type=int, default=8789)
    parser.add_argument(
        "--rpc", action="append", default=[], help="CHAIN_ID=RPC_URL (once per chain)"
    )
    parser.add_argument("--bridge-delay", type=float, default=5.0)
    args = parser.parse_args()
    rpc_urls = {int(k): v for k, v in (item.split("=", 1) for item in args.rpc)}
    server = LocalLifiServer(port=args.port, rpc_urls=rpc_urls, bridge_delay=args.bridge_delay)
    server.start()
    print(f"local swap quotes and bridge on {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
