"""Connect to Picnic's MCP server with OAuth, as an agent on the user's machine does, and call
one tool.

    python docs/examples/mcp_oauth.py https://picnic.example/mcp get_balances

The first run registers this agent (dynamic client registration), opens the consent page in
your browser and waits for the answer on a loopback callback
(http://127.0.0.1:33418/callback); the tokens and the client id are kept in
~/.picnic-mcp-oauth.json, so the next run goes straight to the call (refreshing the token when
it has expired). Needs only the official MCP Python SDK (`pip install mcp`) and picnic_mcp.py,
beside it.

Against `make run`: python docs/examples/mcp_oauth.py http://127.0.0.1:8001/mcp get_profile
(sign in as alice / alice-demo-password on the consent page).

`call_tool()` takes the two halves of the browser step as arguments, so a program (or a test)
can drive the consent page itself: `redirect_handler(url)` sends the user to the authorization
URL, and `LoopbackCallback` receives the code there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import webbrowser
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from picnic_mcp import connect, print_result  # beside this file

CALLBACK_PORT = 33418
STORE = Path.home() / ".picnic-mcp-oauth.json"


class FileTokenStorage(TokenStorage):
    """The SDK's TokenStorage in a JSON file: the client id from the registration and the
    tokens, so a second run needs no consent. Keep the file private: it holds tokens."""

    def __init__(self, path: Path):
        self.path = path

    def _read(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def _write(self, key: str, value) -> None:
        data = self._read()
        data[key] = value.model_dump(mode="json", exclude_none=True)
        self.path.touch(mode=0o600)
        self.path.write_text(json.dumps(data, indent=2))

    async def get_tokens(self) -> OAuthToken | None:
        data = self._read().get("tokens")
        return OAuthToken.model_validate(data) if data else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._write("tokens", tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        data = self._read().get("client_info")
        return OAuthClientInformationFull.model_validate(data) if data else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._write("client_info", client_info)


class LoopbackCallback:
    """The redirect URI on 127.0.0.1: receives the authorization code (or the refusal) once,
    answers the browser, and hands the code to the SDK (`wait`, its callback_handler)."""

    def __init__(self, port: int = CALLBACK_PORT):
        self.url = f"http://127.0.0.1:{port}/callback"
        self.query: dict[str, str] = {}
        self._received = threading.Event()
        callback = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server hook's name
                parts = urlsplit(self.path)
                if parts.path != "/callback":
                    self.send_error(404)
                    return
                callback.query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                body = b"Picnic: you can close this window and return to the agent."
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                callback._received.set()

            def log_message(self, *args) -> None:  # no request lines on the terminal
                pass

        self._server = HTTPServer(("127.0.0.1", port), Handler)

    def __enter__(self) -> LoopbackCallback:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def expect(self) -> None:
        """A new authorization starts: forget any earlier answer (a step-up asks again)."""
        self.query = {}
        self._received.clear()

    async def wait(self, timeout: float = 300) -> AuthorizationCodeResult:
        if not await asyncio.to_thread(self._received.wait, timeout):
            raise TimeoutError("no answer from the consent page")
        if "error" in self.query:
            raise PermissionError(f"authorization refused: {self.query['error']}")
        return AuthorizationCodeResult(
            code=self.query["code"], state=self.query.get("state"), iss=self.query.get("iss")
        )


async def open_in_browser(url: str) -> None:
    print(f"Opening the consent page: {url}", file=sys.stderr)
    webbrowser.open(url)


async def call_tool(
    server_url: str,
    tool: str,
    arguments: dict,
    *,
    storage: TokenStorage,
    redirect_handler: Callable[[str], Awaitable[None]] = open_in_browser,
    callback_port: int = CALLBACK_PORT,
    client_name: str = "Picnic example agent",
):
    """Connect (registering and asking for consent when needed) and call one tool."""
    with LoopbackCallback(callback_port) as callback:

        async def authorize(url: str) -> None:
            callback.expect()  # before the browser can answer
            await redirect_handler(url)

        provider = OAuthClientProvider(
            server_url=server_url,
            client_metadata=OAuthClientMetadata(
                client_name=client_name,
                redirect_uris=[callback.url],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",  # a public client: PKCE binds the code
            ),
            storage=storage,
            redirect_handler=authorize,
            callback_handler=callback.wait,
        )
        async with connect(server_url, auth=provider) as client:
            return await client.call_tool(tool, arguments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("server_url", help="the MCP server, e.g. http://127.0.0.1:8001/mcp")
    parser.add_argument("tool", help="a tool name, e.g. get_profile")
    parser.add_argument("arguments", nargs="?", default="{}", help="the arguments as JSON")
    args = parser.parse_args(argv)
    result = asyncio.run(
        call_tool(
            args.server_url, args.tool, json.loads(args.arguments), storage=FileTokenStorage(STORE)
        )
    )
    return print_result(result)


if __name__ == "__main__":
    sys.exit(main())
