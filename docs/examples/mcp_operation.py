"""An agent's whole walk through a generation operation over MCP, with the official Python SDK:
quote, start as a Task, wait (through a staff review if a policy asks for one), read the result.

    export PICNIC_MCP_TOKEN=<a bearer token with operations:read operations:write>
    python docs/examples/mcp_operation.py "Write a haiku about picnics" --category writing

The server is PICNIC_MCP_URL (default: make run's http://127.0.0.1:8001/mcp). Progress (the
quote, each task status message such as "Waiting for a reviewer…") goes to stderr; the result
(tong_operation_result's JSON) to stdout. Exits 1 when a tool answers an error or the operation
does not succeed. Needs only the official MCP Python SDK (`pip install mcp`) and picnic_mcp.py,
beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any, ClassVar, Literal

import mcp_types as types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from picnic_mcp import connect, error_text, pasted_token, server_url  # beside this file
from pydantic import Field, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"


def say(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


# --- Tasks (MCP 2026-07-28): the SDK lets an extension claim a `resultType: "task"` answer and
# resolve it; this one polls tasks/get until the task ends and hands back its CallToolResult.


class TaskHandle(types.Result):
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


class GetTask(types.Request):
    name_param: ClassVar[str | None] = "taskId"  # the Mcp-Name routing header
    method: Literal["tasks/get"] = "tasks/get"
    params: dict[str, Any]


async def follow(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
    say(f"task {handle.task_id}: {handle.status}")
    last = None
    while True:
        task = await ctx.session.send_request(
            GetTask(params={"taskId": handle.task_id}), TypeAdapter(dict[str, Any])
        )
        if task.get("statusMessage") != last:
            last = task.get("statusMessage")
            say(f"  {task['status']}: {last}")
        if task["status"] in ("completed", "failed", "cancelled"):
            return types.CallToolResult.model_validate(task["result"])
        await asyncio.sleep(task.get("pollInterval", 500) / 1000)


class Tasks(ClientExtension):
    identifier = TASKS

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=follow)]


class ToolError(Exception):
    pass


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise ToolError(error_text(result))
    return result.structured_content


async def walk(url: str, token: str, prompt: str, category: str, tool: str) -> dict[str, Any]:
    async with connect(url, token=token, extensions=[Tasks()]) as c:
        # 1. The price first: nothing is held yet.
        quote = await call(
            c,
            "tong_operation_quote",
            {"tool": tool, "submit_field": "prompt", "submit_value": prompt},
        )
        say(f"quote {quote['id']}: {quote['quoted_credits']} credits until {quote['expires_at']}")
        say("  " + json.dumps(quote["breakdown"]))
        # 2. Start at that price, as a task. The key makes a retry safe: the same key
        #    returns the same operation, never a second hold.
        operation = await call(
            c,
            "tong_operation_start",
            {
                "tool": tool,
                "category": category,
                "quote_id": quote["id"],
                "idempotency_key": str(uuid.uuid4()),
            },
        )
        say(f"operation {operation['id']}: {operation['state']}")
        if operation["state"] != "succeeded":
            raise ToolError(f"the operation ended {operation['state']}")
        # 3. The output, kept until detail_expires_at.
        return await call(c, "tong_operation_result", {"operation_id": operation["id"]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("prompt", help="what to generate")
    parser.add_argument("--category", default="writing", help="the operation's category")
    parser.add_argument("--tool", default="text-gen", help="the generation tool")
    args = parser.parse_args(argv)
    token = pasted_token(parser, "a bearer token for the MCP server")
    try:
        result = asyncio.run(walk(server_url(), token, args.prompt, args.category, args.tool))
    except ToolError as exc:
        say(f"error: {exc}")
        return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
