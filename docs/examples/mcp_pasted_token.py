"""Call one Picnic MCP tool with a pasted bearer token (the one `make run` prints last).

    export PICNIC_MCP_TOKEN=<the bearer token>
    python docs/examples/mcp_pasted_token.py get_balances
    python docs/examples/mcp_pasted_token.py transfer \
        '{"asset_id": "eip155:31337/erc20:0x…", "amount": "1.5", "to": "0x…"}'

The server is PICNIC_MCP_URL (default: make run's http://127.0.0.1:8001/mcp). The token must
be bound to that server (RFC 8707); make run's is. It prints the tool's structured result as
JSON and exits 1 when the tool answers an error. Needs only the official MCP Python SDK
(`pip install mcp`) and picnic_mcp.py, beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from picnic_mcp import connect, pasted_token, print_result, server_url  # beside this file


async def call_tool(url: str, token: str, tool: str, arguments: dict):
    """One tool call over streamable HTTP, the token in the Authorization header."""
    async with connect(url, token=token) as client:
        return await client.call_tool(tool, arguments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tool", help="a tool name, e.g. get_balances, transfer")
    parser.add_argument("arguments", nargs="?", default="{}", help="the arguments as JSON")
    args = parser.parse_args(argv)
    token = pasted_token(parser, "the bearer token make run printed")
    result = asyncio.run(call_tool(server_url(), token, args.tool, json.loads(args.arguments)))
    return print_result(result)


if __name__ == "__main__":
    sys.exit(main())
