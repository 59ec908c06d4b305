"""A local price server speaking CoinGecko's `GET /api/v3/simple/price` shape, for tests and
`make run`. Modes: `ok`, `error` (500), `hang`, `drop`, `garbage` (200, not JSON).

    python -m dev.providers.local_coingecko --port 8791
"""

from __future__ import annotations

import argparse
from urllib.parse import parse_qs, urlsplit

from dev.local_server import LocalJsonServer

# Demo prices (fixed): a dollar coin, a euro coin, and the native coins of the chain table's
# two local chains, xDAI and ether (the network fee on the signing page).
PRICES = {
    "xdai": {"usd": 1.0, "eur": 0.92, "brl": 5.3},
    "usd-coin": {"usd": 1.0, "eur": 0.92, "brl": 5.3},
    "monerium-eur-money": {"usd": 1.08, "eur": 1.0, "brl": 5.75},
    "ethereum": {"usd": 3000.0, "eur": 2760.0, "brl": 15900.0},
}


class LocalCoinGeckoServer(LocalJsonServer):
    def __init__(self, *, port: int = 0, mode: str = "ok"):
        super().__init__(port=port)
        self.mode = mode
        self.requests: list[dict[str, str]] = []

    def on_get(self, handler) -> None:
        url = urlsplit(handler.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append(query)
        if url.path != "/api/v3/simple/price":
            return self.send_json(handler, 404, {"error": "Not found"})
        if self.mode == "hang":
            return self.hang()
        if self.mode == "drop":
            return self.drop(handler)
        if self.mode == "error":
            return self.send_json(handler, 500, {"status": {"error_message": "server error"}})
        if self.mode == "garbage":
            return self.send(handler, 200, b"<html>rate limited</html>")
        currencies = query.get("vs_currencies", "").split(",")
        body = {
            pid: {c: PRICES[pid][c] for c in currencies if c in PRICES[pid]}
            for pid in query.get("ids", "").split(",")
            if pid in PRICES
        }
        self.send_json(handler, 200, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8791)
    args = parser.parse_args()
    server = LocalCoinGeckoServer(port=args.port).start()
    print(f"local CoinGecko-shaped prices on {server.url}")
    try:
        server._thread.join()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
