"""What the Picnic MCP examples share: the server's address, a session of the official MCP
Python SDK over streamable HTTP, and how a tool's answer is printed.

Not a program: the examples beside it import it (`python docs/examples/<example>.py` puts this
folder on the import path). Copy it along with an example. Needs only the official MCP Python
SDK (`pip install mcp`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2  # the HTTP client of the MCP SDK 2.x (installed with it)
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

DEFAULT_URL = "http://127.0.0.1:8001/mcp"  # make run's MCP server


def server_url() -> str:
    """PICNIC_MCP_URL, or make run's server."""
    return os.environ.get("PICNIC_MCP_URL", DEFAULT_URL)


def pasted_token(parser: argparse.ArgumentParser, hint: str) -> str:
    """PICNIC_MCP_TOKEN; without it the usage error says to set it to `hint` (exit 2)."""
    token = os.environ.get("PICNIC_MCP_TOKEN")
    if not token:
        parser.error(f"set PICNIC_MCP_TOKEN to {hint}")
    return token


@asynccontextmanager
async def connect(
    url: str, *, token: str | None = None, auth: httpx2.Auth | None = None, **client_options: Any
) -> AsyncIterator[Client]:
    """An SDK client session with the MCP server at `url`: a pasted bearer `token` in the
    Authorization header, or an `auth` flow such as the SDK's OAuthClientProvider."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with httpx2.AsyncClient(headers=headers, auth=auth, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http), **client_options) as c:
            yield c


def error_text(result) -> str:
    """What a tool that answered an error said."""
    return " ".join(getattr(part, "text", "") for part in result.content)


def print_result(result) -> int:
    """The tool's structured result as JSON on stdout (0), or what it said on stderr (1)."""
    if result.is_error:
        print(error_text(result), file=sys.stderr)
        return 1
    print(json.dumps(result.structured_content, indent=2))
    return 0
