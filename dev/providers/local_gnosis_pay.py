"""A local server speaking the Gnosis Pay API shape, for tests and `make run`.

It verifies SIWE sign-ins for real: the message's address is a Safe on the local chain, and
the signature must pass that Safe's EIP-1271 `isValidSignature` (eth_call). Nonces are single
use. Tokens are HS256 JWTs. Cards are created on first use for the signed-in Safe. Modes:
`ok`, `error` (503 on card calls), `hang` (card calls), `expired` (401 on card calls).

    python -m dev.providers.local_gnosis_pay --port 8790
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import re
import secrets
import time
from urllib.parse import parse_qs, urlsplit

from web3 import Web3

from dev.local_server import LocalJsonServer
from evm.rpc import http_web3

CARD_PATH = re.compile(r"^/api/v1/cards/([^/]+)/(freeze|unfreeze|status)$")
_EIP1271 = [
    {
        "type": "function",
        "name": "isValidSignature",
        "stateMutability": "view",
        "inputs": [{"name": "h", "type": "bytes32"}, {"name": "s", "type": "bytes"}],
        "outputs": [{"name": "", "type": "bytes4"}],
    }
]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class LocalGnosisPayServer(LocalJsonServer):
    def __init__(self, *, rpc_url: str, port: int = 0, mode: str = "ok"):
        super().__init__(port=port)
        self.rpc_url = rpc_url
        self.mode = mode
        self.secret = secrets.token_bytes(32)
        self.nonces: set[str] = set()
        self.cards: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.purchases: dict[str, list[dict]] = {}  # Safe address (lower) → newest first

    def add_purchase(
        self,
        safe: str,
        card_id: str,
        *,
        merchant: str,
        mcc: str,
        cents: int,
        created_at: str,
        kind: str = "Payment",
        pending: bool = False,
        tx_hash: str | None = None,
        city: str = "Berlin",
        local_amount: int | None = None,
        local_currency: tuple[str, str, str] = ("978", "EUR", "€"),
    ) -> dict:
        """A card transaction as Gnosis Pay reports it (amounts in minor units)."""
        eur = {"symbol": "€", "code": "978", "decimals": 2, "name": "Euro"}
        code, alpha, symbol = local_currency
        germany = {"name": "Germany", "numeric": "276", "alpha2": "DE", "alpha3": "DEU"}
        item = {
            "threadId": secrets.token_hex(12),
            "createdAt": created_at,
            "clearedAt": None if pending else created_at,
            "country": germany,
            "isPending": pending,
            "impactsCashback": kind == "Payment",
            "mcc": mcc,
            "merchant": {"name": merchant, "city": city, "country": germany},
            "billingAmount": str(cents),
            "billingCurrency": eur,
            "transactionAmount": str(local_amount if local_amount is not None else cents),
            "transactionCurrency": {"symbol": symbol, "code": code, "decimals": 2, "name": alpha},
            "transactionType": "00",
            "cardToken": card_id,
            "kind": kind,
            "status": "Approved",
            "transactions": [{"status": "ExecSuccess", "hash": tx_hash}] if tx_hash else [],
        }
        self.purchases.setdefault(safe.lower(), []).insert(0, item)
        return item

    # --- JWT ---------------------------------------------------------------------------------

    def _jwt(self, subject: str) -> str:
        header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        claims = _b64(json.dumps({"sub": subject, "exp": int(time.time()) + 3600}).encode())
        signature = _b64(
            hmac.new(self.secret, f"{header}.{claims}".encode(), hashlib.sha256).digest()
        )
        return f"{header}.{claims}.{signature}"

    def _subject(self, handler) -> str | None:
        return self._subject_of(
            (handler.headers.get("Authorization") or "").removeprefix("Bearer ")
        )

    def _subject_of(self, token: str | None) -> str | None:
        """The Safe a JWT of ours was issued to, if it is valid and unexpired."""
        try:
            header, claims, signature = (token or "").split(".")
        except ValueError:
            return None
        expected = _b64(
            hmac.new(self.secret, f"{header}.{claims}".encode(), hashlib.sha256).digest()
        )
        if not hmac.compare_digest(signature, expected):
            return None
        data = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
        return data["sub"] if data["exp"] > time.time() else None

    # --- routes ------------------------------------------------------------------------------

    def on_get(self, handler) -> None:
        self.calls.append(("GET", handler.path))
        if handler.path == "/api/v1/auth/nonce":
            nonce = secrets.token_hex(8)
            self.nonces.add(nonce)
            return self.send(handler, 200, nonce.encode())
        if handler.path.split("?")[0] == "/api/v1/cards/transactions":
            return self._transactions(handler)
        return self._card(handler)

    def _transactions(self, handler) -> None:
        if self.mode == "expired" or (subject := self._subject(handler)) is None:
            return self.send_json(handler, 401, {"message": "Unauthorized"})
        if self.mode == "hang":
            return self.hang()
        if self.mode == "error":
            return self.send_json(handler, 503, {"message": "Service Unavailable"})
        query = parse_qs(urlsplit(handler.path).query)
        limit = int(query.get("limit", ["100"])[0])
        offset = int(query.get("offset", ["0"])[0])
        items = self.purchases.get(subject.lower(), [])
        page = items[offset : offset + limit]
        more = offset + limit < len(items)
        next_url = f"{self.url}/api/v1/cards/transactions?limit={limit}&offset={offset + limit}"
        self.send_json(
            handler,
            200,
            {
                "count": len(items),
                "next": next_url if more else None,
                "previous": None,
                "results": page,
            },
        )

    def on_post(self, handler) -> None:
        body = self.read_body(handler)
        self.calls.append(("POST", handler.path))
        if handler.path == "/api/v1/auth/challenge":
            return self._challenge(handler, body)
        return self._card(handler)

    def _challenge(self, handler, body: bytes) -> None:
        try:
            data = json.loads(body)
            message, signature = data["message"], data["signature"]
            address = message.splitlines()[1].strip()
            nonce = re.search(r"^Nonce: (\w+)$", message, re.M)[1]
        except (ValueError, KeyError, TypeError, IndexError):
            return self.send_json(handler, 422, {"message": "Invalid SIWE message"})
        if nonce not in self.nonces:
            return self.send_json(handler, 401, {"message": "Invalid or already used nonce"})
        self.nonces.discard(nonce)
        w3 = http_web3(self.rpc_url, timeout=30, retries=True)
        digest = Web3.keccak(text=f"\x19Ethereum Signed Message:\n{len(message.encode())}{message}")
        try:
            ok = w3.eth.contract(
                address=Web3.to_checksum_address(address), abi=_EIP1271
            ).functions.isValidSignature(
                digest, Web3.to_bytes(hexstr=signature)
            ).call() == bytes.fromhex("1626ba7e")
        except Exception:  # noqa: BLE001 - a revert (GS0xx) or a non-contract: not valid
            ok = False
        if not ok:
            return self.send_json(handler, 401, {"message": "Signature verification failed"})
        return self.send_json(handler, 200, {"token": self._jwt(Web3.to_checksum_address(address))})

    def _card(self, handler) -> None:
        match = CARD_PATH.match(handler.path)
        if not match:
            return self.send_json(handler, 404, {"message": "Not found"})
        if self.mode == "expired":
            return self.send_json(handler, 401, {"message": "Unauthorized"})
        subject = self._subject(handler)
        if subject is None:
            return self.send_json(handler, 401, {"message": "Unauthorized"})
        if self.mode == "hang":
            return self.hang()
        if self.mode == "error":
            return self.send_json(handler, 503, {"message": "Service Unavailable"})
        card_id, verb = match[1], match[2]
        card = self.cards.setdefault(card_id, {"safe": subject, "frozen": False})
        if card["safe"] != subject:
            return self.send_json(handler, 403, {"message": "Card does not belong to this account"})
        if verb == "status":
            return self.send_json(
                handler,
                200,
                {
                    "activatedAt": "2026-01-01T00:00:00.000Z",
                    "statusCode": 1007 if card["frozen"] else 1000,
                    "isFrozen": card["frozen"],
                    "isStolen": False,
                    "isLost": False,
                    "isBlocked": False,
                    "isVoid": False,
                },
            )
        want = verb == "freeze"
        if card["frozen"] == want:
            return self.send_json(
                handler, 409, {"message": f"Card is already {'frozen' if want else 'active'}"}
            )
        card["frozen"] = want
        return self.send_json(handler, 200, {})


def main() -> None:
    parser = argparse.ArgumentParser(description="Local Gnosis Pay API")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--rpc-url", default="http://127.0.0.1:8545")
    args = parser.parse_args()
    server = LocalGnosisPayServer(rpc_url=args.rpc_url, port=args.port)
    print(f"local Gnosis Pay API on {server.url}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
