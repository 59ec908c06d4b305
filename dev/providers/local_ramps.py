"""Local servers speaking Monerium's and Avenia's API shapes (see actions/providers/ramps.py),
for tests and `make run`. Both check credentials for real and hold per-account statuses that a
test (or the demo seed) sets. Modes: `ok`, `error` (503), `hang`, `drop`, `garbage`.

    python -m dev.providers.local_ramps --monerium-port 8792 --avenia-port 8793
"""

from __future__ import annotations

import argparse
import re
import secrets
import threading
from urllib.parse import parse_qs, urlsplit

from dev.local_server import LocalJsonServer

# The demo user's accounts (seed_demo links them): EUR approved, BRL KYC in review.
DEMO_MONERIUM_PROFILE = "demo-monerium-profile"
DEMO_AVENIA_SUBACCOUNT = "demo-avenia-subaccount"


class _Faults(LocalJsonServer):
    def __init__(self, *, port: int = 0, mode: str = "ok"):
        super().__init__(port=port)
        self.mode = mode
        self.requests: list[str] = []

    def fault(self, handler) -> bool:
        """Answer per the mode; True when it did (the route must not)."""
        if self.mode == "hang":
            self.hang()
        elif self.mode == "drop":
            self.drop(handler)
        elif self.mode == "error":
            self.send_json(handler, 503, {"message": "Service Unavailable"})
        elif self.mode == "garbage":
            self.send(handler, 200, b"<html>maintenance</html>")
        else:
            return False
        return True


class LocalMoneriumServer(_Faults):
    CLIENT_ID = "picnic-local"
    CLIENT_SECRET = "picnic-local-secret"

    def __init__(self, *, port: int = 0, mode: str = "ok"):
        super().__init__(port=port, mode=mode)
        self.tokens: set[str] = set()
        self.profiles: dict[str, str] = {}  # profile id → state

    def on_post(self, handler) -> None:
        form = {k: v[0] for k, v in parse_qs(self.read_body(handler).decode()).items()}
        self.requests.append(f"POST {handler.path}")
        if handler.path != "/auth/token":
            return self.send_json(handler, 404, {"message": "Not found"})
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_id") != self.CLIENT_ID
            or form.get("client_secret") != self.CLIENT_SECRET
        ):
            return self.send_json(handler, 401, {"code": 401, "message": "Invalid client"})
        token = secrets.token_urlsafe(24)
        self.tokens.add(token)
        self.send_json(
            handler, 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}
        )

    def on_get(self, handler) -> None:
        self.requests.append(f"GET {handler.path}")
        match = re.fullmatch(r"/profiles/([^/?]+)", handler.path)
        if not match:
            return self.send_json(handler, 404, {"message": "Not found"})
        if self.fault(handler):
            return None
        token = (handler.headers.get("Authorization") or "").removeprefix("Bearer ")
        if token not in self.tokens:
            return self.send_json(handler, 401, {"code": 401, "message": "Not authenticated"})
        state = self.profiles.get(match[1])
        if state is None:
            return self.send_json(handler, 404, {"code": 404, "message": "Profile not found"})
        self.send_json(
            handler,
            200,
            {"id": match[1], "name": "Demo User", "kind": "personal", "state": state},
        )


class LocalAveniaServer(_Faults):
    TOKEN = "avenia-local-token"

    def __init__(self, *, port: int = 0, mode: str = "ok"):
        super().__init__(port=port, mode=mode)
        self._lock = threading.Lock()
        self.attempts: dict[str, list[dict]] = {}  # subaccount id → attempts, oldest first

    def add_attempt(self, sub_account_id: str, status: str, result: str = "") -> None:
        with self._lock:
            attempts = self.attempts.setdefault(sub_account_id, [])
            attempts.append(
                {
                    "id": secrets.token_hex(8),
                    "levelName": "level-1",
                    "status": status,
                    "result": result,
                    "resultMessage": "",
                    "retryable": result == "REJECTED",
                    "createdAt": f"2026-01-01T00:00:{len(attempts):02d}.000000Z",
                }
            )

    def on_get(self, handler) -> None:
        url = urlsplit(handler.path)
        self.requests.append(f"GET {handler.path}")
        if url.path != "/v2/kyc/attempts":
            return self.send_json(handler, 404, {"error": "not found"})
        if self.fault(handler):
            return None
        if handler.headers.get("Authorization") != f"Bearer {self.TOKEN}":
            return self.send_json(handler, 401, {"error": "invalid token"})
        sub = parse_qs(url.query).get("subAccountId", [""])[0]
        if sub not in self.attempts:
            return self.send_json(handler, 404, {"error": "subaccount not found"})
        with self._lock:
            attempts = list(reversed(self.attempts[sub]))  # newest first, as Avenia lists
        self.send_json(handler, 200, {"attempts": attempts, "cursor": ""})


def demo_servers(monerium_port: int, avenia_port: int):
    monerium = LocalMoneriumServer(port=monerium_port)
    monerium.profiles[DEMO_MONERIUM_PROFILE] = "approved"
    avenia = LocalAveniaServer(port=avenia_port)
    avenia.add_attempt(DEMO_AVENIA_SUBACCOUNT, "PROCESSING")
    return monerium.start(), avenia.start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--monerium-port", type=int, default=8792)
    parser.add_argument("--avenia-port", type=int, default=8793)
    args = parser.parse_args()
    monerium, avenia = demo_servers(args.monerium_port, args.avenia_port)
    print(f"local Monerium on {monerium.url}, local Avenia on {avenia.url}")
    try:
        monerium._thread.join()
    except KeyboardInterrupt:
        monerium.stop()
        avenia.stop()


if __name__ == "__main__":
    main()
