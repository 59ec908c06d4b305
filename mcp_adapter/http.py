"""The streamable-HTTP app: the SDK's session manager and transports behind our own gate.

The SDK's `streamable_http_app` is rebuilt from its parts here, for what a real client needs
and the SDK's app does not do:
- scope discovery and step-up (MCP authorization, "Scope Challenge Handling"): the RFC 9728
  metadata lists `scopes_supported`; a 401 names the scopes of the first authorization
  (`scope=`) and, without any credentials, no error code (RFC 6750 §3.1); a tool call or
  resource read whose scope the token lacks is refused with 403 `insufficient_scope` naming
  the scopes to ask for, so the client's step-up runs (an `isError` result would not start it);
- a clear 400 for an `MCP-Protocol-Version` header no revision defines (the SDK hands it to
  the 2026-07-28 path, which complains about `_meta` keys);
- resumable SSE streams: an event store per session (mcp_adapter/event_store.py);
- a stream lives no longer than its token (`GrantWatch`): every SSE response (the GET stream,
  a POST answered as a stream) re-checks the token before each event it sends and at least
  every STREAM_GRANT_CHECK_SECONDS; once the token is revoked, deleted by a Disconnect or
  expired, nothing more is sent and the stream ends cleanly (a reconnection with it is a 401);
- a CORS preflight for browser clients, from the origins the Origin check allows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.db import close_old_connections
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.api import DATABASE_UNAVAILABLE
from mcp_adapter.event_store import PicnicEventStore, event_store_from_settings
from mcp_adapter.tools import resource_scope

SUPPORTED_VERSIONS = (*MODERN_PROTOCOL_VERSIONS, *reversed(HANDSHAKE_PROTOCOL_VERSIONS))
# What a browser client may send and read (the transport's headers, SEP-2243's, tracing).
CORS_ALLOW_HEADERS = [
    "Authorization",
    "Content-Type",
    "Accept",
    "Mcp-Session-Id",
    "MCP-Protocol-Version",
    "Last-Event-ID",
    "Mcp-Method",
    "Mcp-Name",
    "traceparent",
    "tracestate",
]
logger = logging.getLogger(__name__)
CORS_EXPOSE_HEADERS = ["Mcp-Session-Id", "MCP-Protocol-Version", "WWW-Authenticate"]


class PicnicSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with each session's transport given its own view of the
    event store (the SDK would share one between sessions, keyed by request ids)."""

    def _admit_session(self, requestor):
        transport = super()._admit_session(requestor)
        if transport is not None and isinstance(self.event_store, PicnicEventStore):
            # The SDK's transports keep their store in `_event_store`; this is its one seam.
            transport._event_store = self.event_store.for_session(transport.mcp_session_id)
        return transport


class DatabaseConnections:
    """What Django's own request handlers do, for the MCP server's requests: a connection that
    broke (the database restarted, a failover) is closed before the request's queries, which
    then open a fresh one, instead of failing on the dead one for the life of the process. A
    request the database fails under gets a 503 its client retries, not a 500."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        await sync_to_async(close_old_connections)()
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except (DatabaseOperationalError, DatabaseInterfaceError):
            if started:
                raise
            logger.warning("database unavailable", exc_info=True)
            response = JSONResponse(
                {"error": "unavailable", "error_description": DATABASE_UNAVAILABLE},
                status_code=503,
                headers={"Retry-After": "1"},
            )
            await response(scope, receive, send)


class ScopePolicy:
    """Which scopes the server's tools and resource need, from the tool catalogue."""

    def __init__(self, server):
        self.server = server
        required = list(settings.MCP_REQUIRED_SCOPES)
        specs = list(server.specs.values())
        self.supported = list(dict.fromkeys([*required, *(s.scope for s in specs)]))
        # The first authorization asks for what the read tools need; the rest comes by step-up.
        self.initial = list(dict.fromkeys([*required, *(s.scope for s in specs if not s.step_up)]))

    def needed(self, message: Any) -> str | None:
        """The scope a JSON-RPC request needs, or None when the server has no rule for it."""
        if not isinstance(message, dict) or not isinstance(message.get("params"), dict):
            return None
        params = message["params"]
        method = message.get("method")
        if method == "tools/call":
            name = params.get("name")  # any JSON: the transport refuses what is not a string
            spec = self.server.specs.get(name) if isinstance(name, str) else None
            return spec.scope if spec else None
        if method in ("resources/read", "resources/subscribe"):
            uri = params.get("uri")
            return resource_scope(uri) if isinstance(uri, str) else None
        return None

    def step_up(self, granted: list[str], *needed: str) -> str:
        """The scopes a 403 asks for: those granted that this server uses, plus the missing
        (the spec's recommended approach: the client keeps what it had)."""
        kept = [s for s in granted if s in self.supported]
        return " ".join(dict.fromkeys([*kept, *needed]))


TokenCheck = Callable[[str], Awaitable[bool]]


class GrantWatch:
    """One request's response, cut off once its token no longer holds.

    Only a streaming answer (text/event-stream) is watched: before each chunk goes out the
    token is checked again, and a watcher checks it every STREAM_GRANT_CHECK_SECONDS between
    chunks. When the check fails the chunk is dropped, the response is ended with an empty
    final chunk (a clean end of stream, never a half-written event), and the app is told the
    client went away (`http.disconnect`), which is how the SDK closes a stream."""

    def __init__(self, token: str, check: TokenCheck):
        self.token = token
        self.check = check
        self.revoked = anyio.Event()
        self.streaming = False
        self.ended = False
        self.lock = anyio.Lock()

    async def run(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        self._receive, self._send = receive, send
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            try:
                await app(scope, self.receive, self.send)
            finally:
                tg.cancel_scope.cancel()

    async def _holds(self) -> bool:
        if self.revoked.is_set():
            return False
        if await self.check(self.token):
            return True
        self.revoked.set()
        return False

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(settings.STREAM_GRANT_CHECK_SECONDS)
            if self.streaming and not await self._holds():
                async with self.lock:
                    await self._end()
                return

    async def _end(self) -> None:
        if not self.ended:
            self.ended = True
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send(self, message: Message) -> None:
        async with self.lock:
            if self.ended:
                return  # the stream was cut: what the app still sends goes nowhere
            if message["type"] == "http.response.start":
                content_type = Headers(raw=message.get("headers", [])).get("content-type", "")
                self.streaming = content_type.startswith("text/event-stream")
            elif message["type"] == "http.response.body" and self.streaming:
                if not await self._holds():
                    await self._end()
                    return
            await self._send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.ended = True

    async def receive(self) -> Message:
        """The client's next message, or `http.disconnect` as soon as the token is gone."""
        if self.revoked.is_set():
            return {"type": "http.disconnect"}
        received: list[Message] = []
        async with anyio.create_task_group() as tg:

            async def take() -> None:
                received.append(await self._receive())
                tg.cancel_scope.cancel()

            async def stop() -> None:
                await self.revoked.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(take)
            tg.start_soon(stop)
        return received[0] if received else {"type": "http.disconnect"}


class Gate:
    """Authentication, scope and protocol-version checks in front of the SDK's transport."""

    def __init__(
        self,
        app: ASGIApp,
        policy: ScopePolicy,
        resource_metadata_url: str,
        token_check: TokenCheck | None = None,
    ):
        self.app = app
        self.policy = policy
        self.resource_metadata_url = resource_metadata_url
        self.token_check = token_check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        user = scope.get("user")
        if not isinstance(user, AuthenticatedUser):
            if "authorization" in headers:
                response = self._challenge(
                    401, "invalid_token", "The access token is invalid or expired"
                )
            else:  # RFC 6750 §3.1: no credentials, no error code
                response = self._challenge(401, None, "Authentication required")
            return await response(scope, receive, send)
        granted = list(user.scopes)
        missing = [s for s in settings.MCP_REQUIRED_SCOPES if s not in granted]
        if missing:
            response = self._challenge(
                403,
                "insufficient_scope",
                f"This server needs the scopes {' '.join(missing)}",
                scopes=self.policy.step_up(granted, *missing),
            )
            return await response(scope, receive, send)

        body, receive = await _buffered(receive) if scope["method"] == "POST" else (b"", receive)
        message = _json(body)
        refusal = _version_refusal(headers.get(MCP_PROTOCOL_VERSION_HEADER), message)
        if refusal:
            return await refusal(scope, receive, send)
        needed = self.policy.needed(message)
        if needed and needed not in granted:
            what = message["params"].get("name") or message["params"].get("uri")
            response = self._challenge(
                403,
                "insufficient_scope",
                f"{message['method']} {what} needs the scope {needed}",
                scopes=self.policy.step_up(granted, needed),
            )
            return await response(scope, receive, send)
        if self.token_check is None:
            return await self.app(scope, receive, send)
        watch = GrantWatch(user.access_token.token, self.token_check)
        await watch.run(self.app, scope, receive, send)

    def _challenge(
        self, status: int, error: str | None, description: str, scopes: str | None = None
    ) -> JSONResponse:
        params = []
        if error:
            params += [f'error="{error}"', f'error_description="{description}"']
        params.append(f'scope="{scopes or " ".join(self.policy.initial)}"')
        params.append(f'resource_metadata="{self.resource_metadata_url}"')
        body = (
            {"error": error, "error_description": description} if error else {"detail": description}
        )
        return JSONResponse(
            body, status_code=status, headers={"WWW-Authenticate": "Bearer " + ", ".join(params)}
        )


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """The request body (up to the transport's limit) and a `receive` that gives it again.
    A larger body is passed on unread beyond the limit: the transport answers it with 413."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if not message.get("more_body") or size > DEFAULT_MAX_REQUEST_BODY_SIZE:
            break
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return (body if size <= DEFAULT_MAX_REQUEST_BODY_SIZE else b""), replay


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None  # the transport answers the parse error


def _version_refusal(version: str | None, message: Any) -> JSONResponse | None:
    """400 for an `MCP-Protocol-Version` header that names no revision we speak. A 2026-07-28
    request (its `_meta` carries the version) is left to the SDK, whose answer is that
    revision's: `UnsupportedProtocolVersionError` or `HeaderMismatch`."""
    if version is None or version in SUPPORTED_VERSIONS:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and types.PROTOCOL_VERSION_META_KEY in meta:
        return None
    request_id = message.get("id") if isinstance(message, dict) else None
    error = {
        "code": types.UNSUPPORTED_PROTOCOL_VERSION,
        "message": (
            f"Unsupported MCP-Protocol-Version header: {version[:64]!r}; this server speaks "
            + ", ".join(SUPPORTED_VERSIONS)
        ),
        "data": {"supported": list(SUPPORTED_VERSIONS), "requested": version[:64]},
    }
    body = {"jsonrpc": "2.0", "id": request_id if isinstance(request_id, str | int) else None}
    return JSONResponse({**body, "error": error}, status_code=400)


def streamable_http_app(server) -> Starlette:
    """One endpoint (the path of MCP_RESOURCE_URL) for POST, GET and DELETE; Origin and Host
    checked; bearer tokens required; RFC 9728 metadata at
    /.well-known/oauth-protected-resource<path>."""
    resource = urlsplit(settings.MCP_RESOURCE_URL)
    auth = server.settings.auth
    manager = PicnicSessionManager(
        app=server._lowlevel_server,
        event_store=event_store_from_settings(),
        retry_interval=settings.MCP_SSE_RETRY_MS,
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[
                resource.netloc,
                *(urlsplit(o).netloc for o in settings.MCP_ALLOWED_ORIGINS),
            ],
            allowed_origins=settings.MCP_ALLOWED_ORIGINS,
        ),
    )
    server._lowlevel_server._session_manager = manager  # what `server.session_manager` returns
    policy = ScopePolicy(server)
    metadata_url = str(build_resource_metadata_url(auth.resource_server_url))
    endpoint = CORSMiddleware(
        Gate(
            StreamableHTTPASGIApp(manager),
            policy,
            metadata_url,
            token_check=getattr(server._token_verifier, "still_valid", None),
        ),
        allow_origins=settings.MCP_ALLOWED_ORIGINS,
        allow_methods=["GET", "POST", "DELETE"],
        allow_headers=CORS_ALLOW_HEADERS,
        expose_headers=CORS_EXPOSE_HEADERS,
        max_age=600,
    )
    routes = [
        Route(resource.path or "/mcp", endpoint=endpoint),
        *create_protected_resource_routes(
            resource_url=auth.resource_server_url,
            authorization_servers=[auth.issuer_url],
            scopes_supported=policy.supported,
        ),
    ]
    backend = BearerAuthBackend(
        server._token_verifier,
        resource_server_url=auth.resource_server_url if auth.validate_token_resource else None,
    )
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(DatabaseConnections),
            Middleware(AuthenticationMiddleware, backend=backend),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lambda app: manager.run(),
    )
