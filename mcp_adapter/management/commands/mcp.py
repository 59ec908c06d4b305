"""python manage.py mcp --transport stdio|http [--profile core|full] [--port N]"""

from __future__ import annotations

import anyio
import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand

from mcp_adapter.server import PicnicMCP, http_app
from mcp_adapter.tools import PROFILES


class Command(BaseCommand):
    help = "Run the Picnic MCP server (stdio, or streamable HTTP on 127.0.0.1)."

    def add_arguments(self, parser):
        parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
        parser.add_argument("--profile", choices=PROFILES, default="full")
        parser.add_argument("--port", type=int, default=settings.MCP_HTTP_PORT)
        parser.add_argument("--host", default=settings.MCP_HTTP_HOST)

    def handle(self, *args, transport: str, profile: str, port: int, host: str, **options):
        server = PicnicMCP(profile=profile, http=transport == "http")
        if transport == "stdio":

            async def main() -> None:
                async with server.event_pump():
                    await server.run_stdio_async()

        else:

            async def main() -> None:
                # log_config=None: uvicorn's records go through LOGGING (JSON lines, trace ids)
                # instead of handlers of its own.
                config = uvicorn.Config(
                    http_app(server),
                    host=host,
                    port=port,
                    log_level="warning",
                    log_config=None,
                    # The client's address from X-Forwarded-For of our own proxies only
                    # (uvicorn's default believes any local peer's: core/proxy.py).
                    forwarded_allow_ips=[str(n) for n in settings.TRUSTED_PROXY_IPS],
                )
                async with server.event_pump():
                    await uvicorn.Server(config).serve()

        anyio.run(main)
