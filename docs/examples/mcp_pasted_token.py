"""Call one Picnic MCP tool with a pasted bearer token (the one `make run` prints last).

    export PICNIC_MCP_TOKEN=<the bearer token>
    python docs/examples/mcp_pasted_token.py get_balances
    python docs/examples/mcp_pasted_token.py transfer \
        '{"asset_id": "eip155:31337/erc20:0x…", "amount": "1.5", "to": "0x…"}'

The server is PICNIC_MCP_URL (default: make run's http://127.0.0.1:8001/mcp). The token must
be bound to that server (RFC 8707); make run's is. It prints the tool's structured result as
JSON and exits 1 when the tool answers an error. Needs only the official MCP Python SDK
(`pip install mcp`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import httpx2  # the HTTP client of the MCP SDK 2.x (installed with it)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

DEFAULT_URL = "http://127.0.0.1:8001/mcp"


async def call_tool(url: str, token: str, tool: str, arguments: dict):
    """One tool call over streamable HTTP, the token in the Authorization header."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            return await client.call_tool(tool, arguments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tool", help="a tool name, e.g. get_balances, transfer")
    parser.add_argument("arguments", nargs="?", default="{}", help="the arguments as JSON")
    args = parser.parse_args(argv)
    token = os.environ.get("PICNIC_MCP_TOKEN")
    if not token:
        parser.error("set PICNIC_MCP_TOKEN to the bearer token make run printed")
    url = os.environ.get("PICNIC_MCP_URL", DEFAULT_URL)
    result = asyncio.run(call_tool(url, token, args.tool, json.loads(args.arguments)))
    if result.is_error:
        print(" ".join(getattr(part, "text", "") for part in result.content), file=sys.stderr)
        return 1
    print(json.dumps(result.structured_content, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
