"""A local swap-quote server speaking LI.FI's `GET /v1/quote` shape, for tests and `make run`.

It quotes same-chain swaps between the dev chain's demo tokens through DemoSwapRouter (fixed
rates), building the real `transactionRequest` for it. Modes: `ok`, `error` (500), `hang`,
`drop`; cross-chain or unknown pairs answer 404 `No available quotes`.

    python -m actions.providers.local_lifi --port 8789
"""

from __future__ import annotations

import argparse
import uuid
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

from eth_abi import encode
from eth_utils import function_signature_to_4byte_selector

from chain import contracts
from core.local_server import LocalJsonServer

SWAP = function_signature_to_4byte_selector("swap(address,address,uint256,uint256,address)")


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


class LocalLifiServer(LocalJsonServer):
    def __init__(self, *, port: int = 0, chain_id: int = 31337, mode: str = "ok"):
        super().__init__(port=port)
        self.chain_id = chain_id
        self.mode = mode
        self.requests: list[dict[str, str]] = []

    def on_get(self, handler) -> None:
        url = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append(query)
        if url.path != "/v1/quote":
            return self.send_json(handler, 404, {"message": "Not found", "code": 1000})
        if self.mode == "hang":
            return self.hang()
        if self.mode == "drop":
            return self.drop(handler)
        if self.mode == "error":
            return self.send_json(handler, 500, {"message": "Internal server error", "code": 1000})
        try:
            from_chain, to_chain = int(query["fromChain"]), int(query["toChain"])
            amount = int(query["fromAmount"])
            slippage = Decimal(query.get("slippage", "0.005"))
            tokens = _tokens(from_chain)
            from_token = tokens[query["fromToken"].lower()]
            to_token = tokens[query["toToken"].lower()]
            rate = contracts.DEMO_RATES[(from_token["symbol"], to_token["symbol"])]
        except (KeyError, ValueError, ArithmeticError):
            return self.send_json(
                handler,
                404,
                {"message": "No available quotes for the requested transfer", "code": 1002},
            )
        if from_chain != self.chain_id or to_chain != self.chain_id:
            return self.send_json(
                handler,
                404,
                {"message": "No available quotes for the requested transfer", "code": 1002},
            )
        to_amount = amount * rate // 10**18
        to_min = int(Decimal(to_amount) * (1 - slippage))
        router = contracts.swap_router_address()
        data = SWAP + encode(
            ["address", "address", "uint256", "uint256", "address"],
            [from_token["address"], to_token["address"], amount, to_min, query["toAddress"]],
        )
        return self.send_json(
            handler,
            200,
            {
                "type": "lifi",
                "id": str(uuid.uuid4()),
                "tool": "demo-dex",
                "toolDetails": {"key": "demo-dex", "name": "Demo DEX", "logoURI": ""},
                "action": {
                    "fromChainId": from_chain,
                    "toChainId": to_chain,
                    "fromToken": from_token,
                    "toToken": to_token,
                    "fromAmount": str(amount),
                    "slippage": float(slippage),
                    "fromAddress": query["fromAddress"],
                    "toAddress": query["toAddress"],
                },
                "estimate": {
                    "tool": "demo-dex",
                    "approvalAddress": router,
                    "fromAmount": str(amount),
                    "toAmount": str(to_amount),
                    "toAmountMin": str(to_min),
                    "executionDuration": 15,
                    "feeCosts": [],
                    "gasCosts": [],
                },
                "includedSteps": [],
                "transactionRequest": {
                    "to": router,
                    "data": "0x" + data.hex(),
                    "value": "0x0",
                    "from": query["fromAddress"],
                    "chainId": from_chain,
                    "gasLimit": hex(300_000),
                },
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Local LI.FI-shaped quote server")
    parser.add_argument("--port", type=int, default=8789)
    args = parser.parse_args()
    server = LocalLifiServer(port=args.port)
    print(f"local swap quotes on {server.url}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
