"""The MCP server (official SDK, `MCPServer`): the tool catalogue over our DRF API, the
`picnic://action/{action_id}` resource, and live `notifications/resources/updated`.

Tools are listed from `tools.TOOLS` (exact schemas from the seeds) rather than derived from
Python signatures. Subscriptions: `resources/subscribe` (protocol 2025-11-25) keeps the session
per URI; `subscriptions/listen` (2026-07-28) goes through the SDK's bus. Both are fed by one
task reading `core.events` (Redis pub/sub or local sockets): no database polling.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import defaultdict
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.server.mcpserver.prompts import Prompt
from mcp.server.subscriptions import ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from oauth2_provider.models import get_access_token_model
from redis import RedisError

from core import events, metrics, tracing
from core.api import INVALID_INPUT, error_text, schema_errors
from core.echo import named
from mcp_adapter.api import ApiAnswer, PicnicApi, path_segment
from mcp_adapter.http import streamable_http_app
from mcp_adapter.task_protocol import TaskProtocol
from mcp_adapter.tools import TOOLS, ToolSpec, resource_api_path
from oauth.public import agent_use_record, resource_served

logger = logging.getLogger(__name__)
TOKEN_ENV = "PICNIC_MCP_TOKEN"
# Each URI of a listen request costs one API call to check: bound them.
MAX_LISTEN_URIS = 100


class DjangoTokenVerifier:
    """Bearer tokens are django-oauth-toolkit access tokens issued for this server: their RFC
    8707 audience (DOT's `resource`) names MCP_RESOURCE_URL. A token for another resource, or
    bound to none (a script's token for the API), is refused with a 401 (the MCP
    authorization spec: a server accepts only tokens issued for it)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return await sync_to_async(self._verify)(token)

    async def still_valid(self, token: str) -> bool:
        """Whether a token a stream was opened with still holds (not revoked, deleted by a
        Disconnect, or expired): the streams' re-check (mcp_adapter/http.py)."""
        return await sync_to_async(self._find_fresh)(token) is not None

    @classmethod
    def _find_fresh(cls, token: str):
        # A stream's re-check outlives requests: a connection the database's restart broke is
        # replaced first, as a request's is (DatabaseConnections in mcp_adapter/http.py).
        close_old_connections()
        return cls._find(token)

    @staticmethod
    def _find(token: str):
        model = get_access_token_model()
        checksum = hashlib.sha256(token.encode()).hexdigest()
        found = (
            model.objects.select_related("application", "user")
            .filter(token_checksum=checksum)
            .first()
        )
        if found is None or not found.is_valid():
            return None
        if found.user is not None and not found.user.is_active:  # deactivated: stopped
            return None
        if not any(isinstance(r, str) and resource_served(r) for r in found.resource or ()):
            return None
        return found

    @classmethod
    def _verify(cls, token: str) -> AccessToken | None:
        found = cls._find(token)
        if found is None:
            return None
        if found.user_id is not None and found.application_id is not None:
            # "Connected agents" shows when each agent last came (a write a minute at most).
            agent_use_record(user_id=found.user_id, application_id=found.application_id)
        return AccessToken(
            token=token,
            client_id=found.application.client_id if found.application else "",
            scopes=found.scope.split(),
            expires_at=int(found.expires.timestamp()),
            resource=settings.MCP_RESOURCE_URL,
            subject=str(found.user_id),
        )


class PicnicMCP(MCPServer):
    def __init__(
        self,
        *,
        profile: str = "full",
        output_schemas: bool | None = None,
        http: bool = False,
        api: PicnicApi | None = None,
        token: str | None = None,
    ):
        auth = None
        if http:
            auth = AuthSettings(
                issuer_url=settings.MCP_API_URL,
                resource_server_url=settings.MCP_RESOURCE_URL,
                required_scopes=settings.MCP_REQUIRED_SCOPES or None,
                # DjangoTokenVerifier checks the audience; the SDK checks it again.
                validate_token_resource=True,
            )
        super().__init__(
            name="picnic",
            instructions=(
                "Picnic wallet actions, DM deliveries and generation operations. An accepted "
                "request is not finished work: follow it with the status tools or subscribe to "
                "its resource_uri."
            ),
            auth=auth,
            token_verifier=DjangoTokenVerifier() if http else None,
            # serverInfo.version: the version the API publishes (OpenAPI `info.version`).
            version=settings.SPECTACULAR_SETTINGS["VERSION"],
        )
        self.profile = profile
        if output_schemas is None:
            output_schemas = os.environ.get("SOSOAPI_OUTPUT_SCHEMAS", "") == "1"
        self.output_schemas = output_schemas
        self.http = http
        self.api = api or PicnicApi()
        self._stdio_token = token
        self.specs = {t.name: t for t in TOOLS if profile in t.profiles}
        self._legacy_subscribers: dict[str, set[Any]] = defaultdict(set)
        # The streamable-HTTP sessions, shared with the other instances (set by http_app).
        self.shared_sessions = None
        self.resource(
            "picnic://action/{action_id}",
            name="action",
            description="A Picnic action's status (the get_action_status JSON).",
            mime_type="application/json",
        )(self._read_action)
        if "tong_operation_status" in self.specs:
            self.resource(
                "tong://operation/{operation_id}",
                name="operation",
                description="A generation operation's status (the tong_operation_status JSON); "
                "subscribe to it for every state change.",
                mime_type="application/json",
            )(self._read_operation)
        low = self._lowlevel_server
        low.add_request_handler(
            "resources/subscribe", types.SubscribeRequestParams, self._subscribe
        )
        low.add_request_handler(
            "resources/unsubscribe", types.UnsubscribeRequestParams, self._unsubscribe
        )
        # The SDK's listen handler honours every URI asked for; ours passes it only those the
        # caller may read, so the bus never delivers another user's updates on this stream.
        self._listen = ListenHandler(self._subscriptions)
        low.add_request_handler(
            "subscriptions/listen", types.SubscriptionsListenRequestParams, self._listen_checked
        )
        # MCP tasks, both revisions (mcp_adapter/task_protocol.py).
        self.tasks = TaskProtocol(self)
        self.tasks.install()
        # --- prompts: advertised only once there is one (the product has none) -------------
        # The SDK registers prompts/list and prompts/get, hence the capability, on every
        # server; `add_prompt` puts them back.
        for method in ("prompts/list", "prompts/get"):
            low._request_handlers.pop(method, None)

    def add_prompt(self, prompt: Prompt) -> None:
        super().add_prompt(prompt)
        low = self._lowlevel_server
        low.add_request_handler(
            "prompts/list", types.PaginatedRequestParams, self._handle_list_prompts
        )
        low.add_request_handler(
            "prompts/get", types.GetPromptRequestParams, self._handle_get_prompt
        )

    async def get_prompt(self, name: str, arguments=None, context=None):
        # An unknown name is the caller's mistake (-32602), not the SDK's ValueError (code 0).
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {named(name)}")
        return await super().get_prompt(name, arguments, context)

    # --- who is calling ---------------------------------------------------------------------

    def _token(self) -> str | None:
        if self.http:
            access = get_access_token()
            return access.token if access else None
        return self._stdio_token or os.environ.get(TOKEN_ENV)

    # --- tools -------------------------------------------------------------------------------

    async def list_tools(self) -> list[types.Tool]:
        return [
            types.Tool(
                name=spec.name,
                title=spec.title,
                description=f"{spec.description} Scope: {spec.scope}.",
                input_schema=spec.input_schema,
                output_schema=spec.output_schema if self.output_schemas else None,
                annotations=types.ToolAnnotations(
                    title=spec.title,  # for clients that read the 2025-03-26 place
                    read_only_hint=spec.annotations["readOnlyHint"],
                    destructive_hint=spec.annotations["destructiveHint"],
                    idempotent_hint=spec.annotations["idempotentHint"],
                    open_world_hint=spec.annotations["openWorldHint"],
                ),
                execution=self.tasks.execution(spec.name),
            )
            for spec in self.specs.values()
        ]

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        spec = self.specs.get(name)
        return spec.input_schema if spec else None

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        """Counted and timed by tool and outcome (`picnic_mcp_tool_calls_total`); a name
        that is no tool is counted as "(unknown)" so callers cannot grow the label set."""
        tool = name if name in self.specs else "(unknown)"
        start = time.perf_counter()
        outcome = "raised"
        try:
            result = await self._call_tool(name, arguments, context)
            outcome = "error" if result.is_error else "ok"
            return result
        finally:
            metrics.record_mcp_tool_call(tool, outcome, time.perf_counter() - start)

    async def _call_tool(self, name: str, arguments: dict[str, Any], context=None):
        spec = self.specs.get(name)
        if spec is None:  # a protocol error, not a tool result
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {named(name)}")
        # The API validates against the same schema; checking here too spares a round trip
        # and covers the arguments that go into the path.
        errors = schema_errors(spec.input_schema, arguments, root="(arguments)")
        for name in spec.path_args:  # "" would name the collection, not an item
            value = arguments.get(name)
            if isinstance(value, str) and not (value and value.isprintable()):
                errors.setdefault(name, []).append(
                    "must not be empty" if not value else "must not contain control characters"
                )
        if errors:
            return _error(error_text(INVALID_INPUT, errors))
        token = self._token()
        if not token:
            return _error(f"Not authenticated: set {TOKEN_ENV} to an OAuth2 access token")
        # The caller's trace continues through the API call (PicnicApi sends our traceparent);
        # with spans exported, the tool's span (the SDK's `tools/call <tool>`) is our context.
        with tracing.span_of(incoming_traceparent(context)):
            answer = await self._call_api(spec, arguments, token)
        if not answer.ok:
            return _error(answer.message)
        problem = self._answer_problem(spec, answer)
        if problem:
            return _error(problem)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(answer.body))],
            structured_content=answer.body,
        )

    def _answer_problem(self, spec: ToolSpec, answer: ApiAnswer) -> str | None:
        """A 2xx is the tool's result only if it is the JSON object the tool describes."""
        if not answer.is_json or not isinstance(answer.body, dict):
            return f"The Picnic API answered {answer.status} without a JSON object"
        if self.output_schemas and spec.output_schema:
            errors = schema_errors(spec.output_schema, answer.body, root="(result)")
            if errors:
                return error_text(
                    "The Picnic API's answer does not match the tool's schema", errors
                )
        return None

    async def _call_api(self, spec: ToolSpec, arguments: dict[str, Any], token: str):
        path = spec.path.format(**{k: path_segment(arguments[k]) for k in spec.path_args})
        body = {k: v for k, v in arguments.items() if k not in spec.path_args}
        return await self.api.call(spec.method, path, token=token, body=body)

    # --- the action resource ----------------------------------------------------------------

    async def _read_action(self, action_id: str) -> str:
        if named(action_id) != action_id:  # far too long to be an id: no API call to make
            raise ResourceNotFoundError(f"Action not found: {named(action_id)}")
        return await self._read_path(_action_path(action_id))

    async def _read_operation(self, operation_id: str) -> str:
        if named(operation_id) != operation_id:
            raise ResourceNotFoundError(f"Operation not found: {named(operation_id)}")
        return await self._read_path(f"/api/v1/operations/{path_segment(operation_id)}")

    async def _handle_read_resource(self, ctx, params: types.ReadResourceRequestParams):
        # The SDK's refusal names the whole URI twice (message and `data.uri`): a URI of
        # 60 KB came back whole. Short ones stay as sent (SEP-2164's data).
        try:
            return await super()._handle_read_resource(ctx, params)
        except MCPError as exc:
            uri = str(params.uri)
            if named(uri) == uri:
                raise
            message = exc.error.message.replace(uri, named(uri))
            raise MCPError(exc.error.code, named(message, 300), {"uri": named(uri)}) from None

    async def _read_path(self, path: str) -> str:
        token = self._token()
        if not token:
            raise ResourceError("Not authenticated")
        answer = await self.api.call("GET", path, token=token)
        if 400 <= answer.status < 500:
            # None for this caller (no such action, not theirs, out of retention): -32602
            # (SEP-2164), not the internal error (-32603) a plain ResourceError becomes.
            raise ResourceNotFoundError(answer.message)
        if not answer.ok:
            raise ResourceError(answer.message)
        if not answer.is_json or not isinstance(answer.body, dict):
            raise ResourceError(f"The Picnic API answered {answer.status} without a JSON object")
        return json.dumps(answer.body)

    async def _refusal(self, uri: str) -> str | None:
        """Why the caller may not follow `uri`, or None: the check of reading it (the API's
        GET with the caller's token: the action's or operation's user and OAuth client)."""
        path = resource_api_path(uri)
        if path is None:
            return f"Not a subscribable resource: {named(uri)}"
        token = self._token()
        if not token:
            return "Not authenticated"
        answer = await self.api.call("GET", path, token=token)
        # another user's action, or none: the API's words, nothing more
        return None if answer.ok else answer.message

    async def _subscribe(self, ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        refusal = await self._refusal(uri)
        if refusal:
            raise MCPError(types.INVALID_PARAMS, refusal)
        session_id = _session_id(ctx)
        if self.shared_sessions is not None and session_id:
            # Kept with the session, for every instance (mcp_adapter/sessions.py).
            await self.shared_sessions.sessions.follow(session_id, uri)
        else:  # stdio: this process's one session
            self._legacy_subscribers[uri].add(ctx.session)
        return types.EmptyResult()

    async def _listen_checked(self, ctx, params: types.SubscriptionsListenRequestParams):
        """subscriptions/listen with each URI checked. One the caller may not read is left
        out of the acknowledged filter (the spec's "subset the server agreed to honor"), so
        the client learns it is not followed and the stream never carries it."""
        requested = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        if len(requested) > MAX_LISTEN_URIS:
            raise MCPError(
                types.INVALID_PARAMS, f"At most {MAX_LISTEN_URIS} resource subscriptions per stream"
            )
        allowed = [uri for uri in requested if await self._refusal(uri) is None]
        task_ids = self.tasks.requested_task_ids(params)
        if task_ids is not None:  # a stream for task status too: ours (the SDK's knows none)
            return await self.tasks.listen(
                ctx,
                params,
                task_ids=task_ids,
                uris=allowed,
                bus=self._subscriptions,
                limit=MAX_LISTEN_URIS,
            )
        notifications = params.notifications.model_copy(
            update={"resource_subscriptions": allowed or None}
        )
        return await self._listen(ctx, params.model_copy(update={"notifications": notifications}))

    async def _unsubscribe(self, ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        session_id = _session_id(ctx)
        if self.shared_sessions is not None and session_id:
            await self.shared_sessions.sessions.unfollow(session_id, str(params.uri))
        self._legacy_subscribers.get(str(params.uri), set()).discard(ctx.session)
        return types.EmptyResult()

    # --- live updates -----------------------------------------------------------------------

    @asynccontextmanager
    async def event_pump(self):
        """Run the one listener that turns published transitions into notifications."""
        async with anyio.create_task_group() as tg:
            ready = anyio.Event()
            tg.start_soon(self._pump, ready)
            await ready.wait()
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def _pump(self, ready: anyio.Event) -> None:
        while True:
            try:
                async with events.subscribe() as subscription:
                    ready.set()
                    while True:
                        event = await subscription.receive()
                        if event.get("uri"):
                            await self.notify_updated(event["uri"], event.get("event_id"))
                        await self.tasks.on_event(event)
            except events.SubscriptionLost:
                if not ready.is_set():
                    raise  # no channel at start: fail loudly
                # Redis went away: listen again (events meanwhile are missed; clients re-read).
                logger.warning("event subscription lost; subscribing again", exc_info=True)
                await anyio.sleep(1)

    async def notify_updated(self, uri: str, event_id: str | None = None) -> None:
        await self._subscriptions.publish(ResourceUpdated(uri=uri))
        if self.shared_sessions is not None:
            try:
                await self.shared_sessions.notify_updated(uri, event_id)
            except RedisError:  # best-effort, like the events: clients re-read on reconnect
                logger.warning("could not notify the sessions following %s", uri, exc_info=True)
        for session in list(self._legacy_subscribers.get(uri, ())):
            try:
                await session.send_resource_updated(uri)
            except Exception:  # noqa: BLE001 - a closed session: forget it
                self._legacy_subscribers[uri].discard(session)


def incoming_traceparent(context) -> Any:
    """The caller's W3C `traceparent`: from the request's `_meta` (SEP-414, any transport),
    else from the HTTP request's header (streamable HTTP); `tracing.span` ignores anything
    that is not a valid header."""
    request_context = getattr(context, "request_context", None)
    meta = getattr(request_context, "meta", None)
    if isinstance(meta, dict) and tracing.parse(meta.get(tracing.HEADER)):
        return meta[tracing.HEADER]
    request = getattr(request_context, "request", None)
    headers = getattr(request, "headers", None)
    return headers.get(tracing.HEADER) if headers is not None else None


def _session_id(context) -> str | None:
    """The streamable-HTTP session a request belongs to (its `Mcp-Session-Id`), if any."""
    headers = getattr(getattr(context, "request", None), "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


def _action_path(action_id: str) -> str:
    return f"/api/v1/actions/{path_segment(action_id)}"


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


def http_app(server: PicnicMCP):
    """The streamable-HTTP app (mcp_adapter/http.py)."""
    return streamable_http_app(server)
