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
- a stream lives no longer than its token (`GrantWatch`, mcp_adapter/grant_watch.py): every SSE response (the GET stream,
  a POST answered as a stream) re-checks the token before each event it sends and at least
  every STREAM_GRANT_CHECK_SECONDS; once the token is revoked, deleted by a Disconnect or
  expired, nothing more is sent and the stream ends cleanly (a reconnection with it is a 401);
- a CORS preflight for browser clients, from the origins the Origin check allows.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from contextlib import asynccontextmanager
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
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    authorization_context,
)
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    MCP_SESSION_ID_HEADER,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import (
    StreamableHTTPASGIApp,
    StreamableHTTPSessionManager,
    _send_and_report_status,
)
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import InitializeRequestParams
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from redis import RedisError
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
from mcp_adapter.grant_watch import GrantWatch, TokenCheck
from mcp_adapter.sessions import EVENT_META_KEY, SessionRecord, Sessions, sessions_from_settings
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
CORS_EXPOSE_HEADERS = ["Mcp-Session-Id", "MCP-Protocol-Version", "WWW-Authenticate"]
logger = logging.getLogger(__name__)


# The session whose opening request (`initialize`) this task is serving.
_opening: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "picnic_mcp_opening_session", default=None
)
# How often an instance checks that the sessions it holds still exist (ended by a DELETE or
# their expiry elsewhere: their streams here close).
SWEEP_SECONDS = 5
UNAVAILABLE = "The MCP session store is unavailable; try again"


class PicnicSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, with sessions shared between instances (sessions.py).

    The SDK keeps a session in the process that opened it; here a request naming a session this
    process does not hold is served by building its transport and connection again from the
    shared record (`_rehydrate`), marked initialized, owned by the same credential. Seams of the
    SDK used (it has no documented hook for either):
    - `_handle_stateful_request`, `_serve_opening_request`, `_admit_session`, `_discard_session`,
      `_server_instances`, `_session_owners`, `_task_group`, `_lifespan_state` (the manager's
      private session table: overridden and filled, never reimplemented);
    - each session is driven by `serve_connection` with a `Connection` we build (what the SDK's
      `serve_loop` does inside), so the connection's negotiated state can be restored and
      notifications sent on it; the record is written by a server middleware (the SDK's
      documented way to observe `initialize`) before the `initialize` answer leaves.
    Each transport gets its own view of the event store (`transport._event_store` for the
    transports the SDK makes; the constructor's argument for ours)."""

    def __init__(self, *args, sessions: Sessions, **kwargs):
        super().__init__(*args, **kwargs)
        self.sessions = sessions
        self.connections: dict[str, Connection] = {}
        self._unrecorded: set[str] = set()  # opened, but the store could not take the record
        self.app.middleware.append(self._record_initialize)

    def _admit_session(self, requestor):
        transport = super()._admit_session(requestor)
        if transport is not None:
            self._give_event_store(transport)
        return transport

    def _give_event_store(self, transport: StreamableHTTPServerTransport) -> None:
        """The session's view of the store. The SDK's transports keep their store in
        `_event_store` and the requests they are handling in `_request_streams`: its seams."""
        if isinstance(self.event_store, PicnicEventStore):
            transport._event_store = self.event_store.for_session(
                transport.mcp_session_id,
                handling=lambda request_id: request_id in transport._request_streams,
            )

    @asynccontextmanager
    async def run(self):
        async with super().run(), anyio.create_task_group() as tg:
            tg.start_soon(self._sweep)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def _record_initialize(self, ctx, call_next):
        """Server middleware: once `initialize` succeeds, its session is written to the shared
        store, before the answer leaves (a client's next request may reach another instance)."""
        result = await call_next(ctx)
        session_id = _opening.get()
        if ctx.method == "initialize" and session_id is not None and isinstance(result, dict):
            record = SessionRecord(
                session_id=session_id,
                protocol_version=str(result.get("protocolVersion")),
                client_params=dict(ctx.params or {}),
                owner=self._session_owners.get(session_id),
                created=time.time(),
            )
            try:
                await self.sessions.save(record)
            except RedisError as exc:  # no session the other instances cannot see
                logger.warning("could not record MCP session %s", session_id, exc_info=True)
                self._unrecorded.add(session_id)
                raise MCPError(types.INTERNAL_ERROR, UNAVAILABLE) from exc
        return result

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        session_id = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        if session_id is None:  # a new session (`_serve_opening_request`)
            return await super()._handle_stateful_request(scope, receive, send)
        try:
            record = await self.sessions.touch(session_id)
        except RedisError:
            logger.warning("could not read MCP session %s", session_id[:64], exc_info=True)
            return await _unavailable()(scope, receive, send)
        held = self._server_instances.get(session_id)
        if record is None and held is not None:  # ended elsewhere (DELETE) or expired
            await self._discard_session(session_id, held)
        elif record is not None and held is None:
            user = scope.get("user")
            requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
            if requestor == record.owner:  # another credential: the SDK's 404, as for no session
                await self._rehydrate(record)
        if scope["method"] == "DELETE" and session_id in self._server_instances:
            send = self._ended_everywhere_first(session_id, send)
        await super()._handle_stateful_request(scope, receive, send)

    def _ended_everywhere_first(self, session_id: str, send: Send) -> Send:
        """A DELETE's success is answered only once the shared record is gone: otherwise the
        client's next request, on another instance, could find the session still alive."""

        async def send_after_delete(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 300:
                await self.sessions.delete(session_id)  # ends it on every instance
            await send(message)

        return send_after_delete

    async def _serve_opening_request(self, http_transport, scope, receive, send) -> None:
        session_id = http_transport.mcp_session_id
        token = _opening.set(session_id)
        try:
            await self._serve(http_transport, None, scope, receive, send)
        finally:
            _opening.reset(token)

    async def _rehydrate(self, record: SessionRecord) -> None:
        """A transport and connection for a session opened on another instance."""
        transport = StreamableHTTPServerTransport(
            mcp_session_id=record.session_id,
            is_json_response_enabled=self.json_response,
            event_store=self.event_store,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        self._give_event_store(transport)
        async with self._session_creation_lock:
            if record.session_id in self._server_instances:
                return  # a concurrent request of the same session got here first
            self._server_instances[record.session_id] = transport
            if record.owner is not None:
                self._session_owners[record.session_id] = record.owner
        assert self._task_group is not None
        await self._task_group.start(self._run_session, transport, record)

    async def _serve(self, transport, record, scope, receive, send) -> None:
        """The SDK's `_serve_opening_request`, with the session driven by `_run_session`."""
        established = False
        try:
            assert self._task_group is not None
            await self._task_group.start(self._run_session, transport, record)
            status = await _send_and_report_status(transport.handle_request, scope, receive, send)
            unrecorded = transport.mcp_session_id in self._unrecorded
            self._unrecorded.discard(transport.mcp_session_id)
            established = status is not None and status < 400 and not unrecorded
        finally:
            if not established:
                await self._discard_session(transport.mcp_session_id, transport)

    async def _run_session(
        self, transport, record: SessionRecord | None, *, task_status=anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve one session's messages until it ends here (DELETE, idle timeout, crash). What
        the SDK's `serve_loop` does, with the `Connection` kept: restored from `record` for a
        session opened elsewhere (its handshake is over), and reachable for notifications."""
        session_id = transport.mcp_session_id
        async with transport.connect() as (read_stream, write_stream):
            task_status.started()
            dispatcher = JSONRPCDispatcher(
                read_stream, write_stream, inline_methods=frozenset({"initialize"})
            )
            connection = Connection.for_loop(dispatcher, session_id=session_id)
            if record is not None:
                connection.client_params = InitializeRequestParams.model_validate(
                    record.client_params, by_name=False
                )
                connection.protocol_version = record.protocol_version
                connection.initialized.set()
            self.connections[session_id] = connection
            try:
                idle_scope = transport.idle_scope or anyio.CancelScope()
                with idle_scope:
                    await serve_connection(
                        self.app,
                        dispatcher,
                        connection=connection,
                        lifespan_state=self._lifespan_state,
                    )
            except Exception:
                logger.exception("Session %s crashed", session_id)
            finally:
                if self.connections.get(session_id) is connection:
                    del self.connections[session_id]
                await self._discard_session(session_id, transport)

    async def notify_updated(self, uri: str, event_id: str | None) -> None:
        """`notifications/resources/updated` to every session following `uri`, on any instance:
        sent on the session's standalone stream where this instance holds the session, else
        written straight into that stream's events (the client gets it on reconnection). Every
        instance does this for every event; with `event_id` the stream keeps one copy."""
        meta = {EVENT_META_KEY: event_id} if event_id else None
        for session_id in await self.sessions.followers(uri):
            connection = self.connections.get(session_id)
            if connection is not None:
                await connection.send_resource_updated(uri, meta=meta)
            elif isinstance(self.event_store, PicnicEventStore) and event_id:
                params: dict[str, Any] = {"uri": uri, "_meta": meta}
                message = types.JSONRPCNotification(
                    jsonrpc="2.0", method="notifications/resources/updated", params=params
                )
                store = self.event_store.for_session(session_id)
                await store.store_event(GET_STREAM_KEY, message)

    async def _sweep(self) -> None:
        """Close here the sessions that ended elsewhere; keep alive those held here."""
        while True:
            await anyio.sleep(SWEEP_SECONDS)
            held = list(self._server_instances)
            if not held:
                continue
            try:
                alive = await self.sessions.alive(held)
            except RedisError:
                logger.warning("could not check the shared MCP sessions", exc_info=True)
                continue
            for session_id in held:
                transport = self._server_instances.get(session_id)
                if session_id not in alive and transport is not None:
                    await self._discard_session(session_id, transport)


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
            await _unavailable(DATABASE_UNAVAILABLE)(scope, receive, send)


def _unavailable(message: str = UNAVAILABLE) -> JSONResponse:
    """503 while the shared session store (or the database) cannot be reached: the client
    retries."""
    error = {"code": types.INTERNAL_ERROR, "message": message}
    body = {"jsonrpc": "2.0", "id": None, "error": error}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


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
        sessions=sessions_from_settings(),
        session_idle_timeout=settings.MCP_SESSION_IDLE_SECONDS,
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
    server.shared_sessions = manager
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
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(DatabaseConnections),
            Middleware(AuthenticationMiddleware, backend=backend),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lambda app: manager.run(),
    )
    # A server span per request, from its `traceparent` (picnic.otel); the SDK's message spans
    # and the tool call's API request hang under it.
    return OpenTelemetryMiddleware(app)
