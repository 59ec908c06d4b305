"""An agent's walk through a spending permission over MCP, with the official Python SDK: ask for a
weekly allowance, wait until the user signed it once, pay within it with no prompt, then pay
past it and get a sign_url with the reason.

    export PICNIC_MCP_TOKEN=<a bearer token with read:actions write:actions>
    python docs/examples/mcp_spend_permission.py <USDC asset id> merchant.eth \
        --allowance 15 --pay 5 5 4 --over 2

It prints the grant's sign_url on stderr and waits (up to --wait seconds) while the user opens it
and approves with the passkey; then each payment (`sign_url: null`, `signed_by_permission`),
waited for until executed; then the one over the allowance (its `sign_url` and
`permission_note`). The server is PICNIC_MCP_URL (default: make run's
http://127.0.0.1:8001/mcp). Progress goes to stderr; the end, get_spend_permissions' answer
and the last transfer's, to stdout as JSON. Exits 1 when a tool answers an error or a step does
not go as described. Needs only the official MCP Python SDK (`pip install mcp`) and
picnic_mcp.py, beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp import Client
from picnic_mcp import connect, error_text, pasted_token, server_url  # beside this file

ENDED = {"executed", "failed", "rejected", "expired"}


def say(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


class WalkError(Exception):
    pass


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise WalkError(f"{tool}: {error_text(result)}")
    return result.structured_content


async def until_ended(client: Client, action_id: str, timeout: float) -> dict[str, Any]:
    """get_action_status until the action ends (executed, failed, rejected, expired)."""
    deadline = time.monotonic() + timeout
    while True:
        status = await call(client, "get_action_status", {"action_id": action_id})
        if status["status"] in ENDED:
            return status
        if time.monotonic() > deadline:
            raise WalkError(f"action {action_id} still {status['status']} after {timeout:.0f} s")
        await asyncio.sleep(1)


async def walk(url: str, token: str, args: argparse.Namespace) -> dict[str, Any]:
    async with connect(url, token=token) as c:
        # 1. Ask once: the user reads it in plain words on the signing page.
        expires = datetime.now(UTC) + timedelta(days=args.days)
        grant = await call(
            c,
            "request_spend_permission",
            {
                "asset_id": args.asset_id,
                "amount": args.allowance,
                "period": args.period,
                "recipients": [args.to],
                "expires_at": expires.isoformat(timespec="seconds").replace("+00:00", "Z"),
                "purpose": args.purpose,
                "name": args.name,
            },
        )
        say(grant["summary"])
        say(f"open {grant['sign_url']} and approve with the passkey (waiting {args.wait} s)")
        signed = await until_ended(c, grant["action_id"], args.wait)
        if signed["status"] != "executed":
            raise WalkError(f"the grant ended {signed['status']}: {signed.get('error')}")
        say(f"granted on chain in block {signed['block_number']}")
        # 2. Within it: no prompt, the server signs with the grant's session key.
        for amount in args.pay:
            paid = await call(
                c, "transfer", {"asset_id": args.asset_id, "amount": amount, "to": args.to}
            )
            if paid["sign_url"] is not None:
                raise WalkError(f"{amount} asked for a signature: {paid.get('permission_note')}")
            done = await until_ended(c, paid["action_id"], 90)
            say(
                f"paid {amount}: {done['status']}, signed by permission {paid['signed_by_permission']}"
            )
            if done["status"] != "executed":
                raise WalkError(f"the payment of {amount} ended {done['status']}: {done['error']}")
        # 3. Past it: the normal signing flow, and why.
        over = await call(
            c, "transfer", {"asset_id": args.asset_id, "amount": args.over, "to": args.to}
        )
        if over["sign_url"] is None:
            raise WalkError(f"{args.over} went through without a prompt")
        say(f"{args.over}: {over['permission_note']}; the user signs it at {over['sign_url']}")
        permissions = await call(c, "get_spend_permissions", {})
        return {"permissions": permissions["permissions"], "over_the_allowance": over}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("asset_id", help="the token's CAIP-19 id (get_balances' assetId)")
    parser.add_argument("to", help="the recipient: an address or an ENS name")
    parser.add_argument("--allowance", default="15", help="the amount per period")
    parser.add_argument("--period", default="weekly", choices=["daily", "weekly", "monthly"])
    parser.add_argument("--days", type=int, default=90, help="the permission ends after")
    parser.add_argument("--pay", nargs="+", default=["5", "5", "4"], help="amounts within it")
    parser.add_argument("--over", default="2", help="an amount past what remains")
    parser.add_argument("--purpose", default="weekly coffee beans")
    parser.add_argument("--name", default="coffee")
    parser.add_argument("--wait", type=float, default=600, help="seconds to wait for the grant")
    args = parser.parse_args(argv)
    token = pasted_token(parser, "a bearer token with read:actions write:actions")
    try:
        result = asyncio.run(walk(server_url(), token, args))
    except WalkError as exc:
        say(f"error: {exc}")
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
