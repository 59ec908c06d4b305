"""MCP tasks on the wire, for both revisions, over the durable store (`task_store`).

- 2025-11-25 (core, experimental): capability `tasks {list, cancel, requests.tools.call}`, the
  action and DM tools list `execution.taskSupport: "optional"`, `tools/call` with `task: {ttl}`
  answers `CreateTaskResult {task}`, then `tasks/get`, `tasks/result` (blocks until terminal,
  `_meta["io.modelcontextprotocol/related-task"]`), `tasks/list`, `tasks/cancel` and
  `notifications/tasks/status` to the session that created or read the task.
- 2026-07-28 (SEP-2663, `io.modelcontextprotocol/tasks`): a client that declares the extension
  in the request's `_meta` clientCapabilities gets `{"resultType": "task", …}` for those tools;
  `tasks/get` inlines `result`; `tasks/update` and `tasks/cancel` acknowledge with `{}`;
  `notifications/tasks` go to `subscriptions/listen` streams that asked for `taskIds`.

The SDK (mcp 2.3.0) models the 2025 types (`mcp_types.Task`, `ServerTasksCapability`, …) but
serves none of the methods and has no store; its listen handler knows no `taskIds`. So the
methods are plain request handlers, the `tools/call` part is one server middleware, and the
listen stream that carries tasks is ours (it also carries the resource updates it was asked
for)."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import UTC
from typing import Any

import anyio
import mcp_types as types
from asgiref.sync import sync_to_async
from django.conf import settings
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY, ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict, Field

from mcp_adapter import task_store
from mcp_adapter.models import McpTask, TaskStatus
from mcp_adapter.task_store import TASK_TOOLS, AuthContext, TaskError

logger = logging.getLogger(__name__)

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
LEGACY = "2025-11-25"  # the one handshake revision that defines tasks
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021


class UpdateTaskParams(types.RequestParams):
    task_id: str = Field(alias="taskId")
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


class _Notification(BaseModel):
    """A notification the SDK has no type for (`notifications/tasks`, and the 2025 one, whose
    type the SDK keeps off its wire surface); the session sends whatever it dumps."""

    model_config = ConfigDict(extra="forbid")
    method: str
    params: dict[str, Any]


def _iso(value) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def legacy_task(task: McpTask) -> dict[str, Any]:
    """The 2025-11-25 `Task`."""
    return {
        "taskId": str(task.pk),
        "status": task.status,
        "statusMessage": task.status_message,
        "createdAt": _iso(task.created_at),
        "lastUpdatedAt": _iso(task.last_updated_at),
        "ttl": task.ttl_ms,
        "pollInterval": settings.MCP_TASK_POLL_INTERVAL_MS,
    }


def modern_task(task: McpTask) -> dict[str, Any]:
    """The 2026-07-28 `DetailedTask`: a tool result, error or not, is `completed` with it."""
    ended_with_result = task.status in (TaskStatus.COMPLETED, TaskStatus.FAILED)
    detailed: dict[str, Any] = {
        "taskId": str(task.pk),
        "status": TaskStatus.COMPLETED if ended_with_result else task.status,
        "statusMessage": task.status_message,
        "createdAt": _iso(task.created_at),
        "lastUpdatedAt": _iso(task.last_updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": settings.MCP_TASK_POLL_INTERVAL_MS,
    }
    if ended_with_result:
        detailed["result"] = task.result
    return detailed


def _invalid(exc: TaskError) -> MCPError:
    return MCPError(types.INVALID_PARAMS, str(exc))


def _not_in_revision(method: str, version: str) -> MCPError:
    return MCPError(types.METHOD_NOT_FOUND, f"{method} is not defined in revision {version}")


def _forget(registry: dict[str, set[Any]], task_id: str, item: Any) -> None:
    """Drop one waiter, stream or session of a task, and the task's entry once it is empty
    (the registries live as long as the server: they must not keep every task id seen)."""
    items = registry.get(task_id)
    if items is not None:
        items.discard(item)
        if not items:
            registry.pop(task_id, None)


def _declares_extension(meta: Any) -> bool:
    capabilities = meta.get(CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and EXTENSION in extensions


class TaskProtocol:
    def __init__(self, server):
        self.server = server
        self._waiters: dict[str, set[anyio.Event]] = defaultdict(set)  # tasks/result
        self._sessions: dict[str, set[Any]] = defaultdict(set)  # 2025 sessions per task
        self._streams: dict[str, set[Any]] = defaultdict(set)  # 2026 listen streams per task

    def install(self) -> None:
        low = self.server._lowlevel_server
        low.middleware.append(self._tools_call)
        low.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get)
        low.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._result)
        low.add_request_handler("tasks/list", types.PaginatedRequestParams, self._list)
        low.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel)
        low.add_request_handler("tasks/update", UpdateTaskParams, self._update)
        # 2026-07-28 reads `extensions`, 2025-11-25 reads `tasks`: each revision's surface
        # drops the other's field, so neither is advertised where it does not exist.
        low.extensions[EXTENSION] = {}
        base = low.get_capabilities

        def get_capabilities(*args, **kwargs) -> types.ServerCapabilities:
            return base(*args, **kwargs).model_copy(
                update={
                    "tasks": types.ServerTasksCapability(
                        list=types.TasksListCapability(),
                        cancel=types.TasksCancelCapability(),
                        requests=types.ServerTasksRequestsCapability(
                            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
                        ),
                    )
                }
            )

        low.get_capabilities = get_capabilities

    @staticmethod
    def execution(tool: str) -> types.ToolExecution | None:
        return types.ToolExecution(task_support="optional") if tool in TASK_TOOLS else None

    async def _context(self) -> AuthContext:
        context = await sync_to_async(task_store.auth_context_for_token)(self.server._token())
        if context is None:
            raise MCPError(types.INVALID_PARAMS, "Not authenticated")
        return context

    # --- tools/call -------------------------------------------------------------------------

    async def _tools_call(self, ctx, call_next):
        if ctx.method != "tools/call" or not isinstance(ctx.params, dict):
            return await call_next(ctx)
        version, params = ctx.protocol_version, ctx.params
        modern = version in MODERN_PROTOCOL_VERSIONS
        as_task = (
            _declares_extension(ctx.meta) if modern else version == LEGACY and "task" in params
        )
        if not as_task:
            return await call_next(ctx)
        name = params.get("name")
        if name not in TASK_TOOLS or name not in self.server.specs:
            if modern:  # the server decides: this one answers with its plain result
                return await call_next(ctx)
            raise MCPError(
                types.METHOD_NOT_FOUND, f"Tool {name!r} does not support task-augmented calls"
            )
        context = await sync_to_async(task_store.auth_context_for_token)(self.server._token())
        if context is not None and not await sync_to_async(task_store.tasks_live_room)(
            context=context
        ):
            if modern:  # the server decides: no task this time, the plain answer
                return await call_next(ctx)
            raise MCPError(
                types.INVALID_REQUEST,
                f"Too many tasks in progress for this client (at most "
                f"{settings.MCP_TASK_MAX_LIVE}): wait for one to end or cancel one",
            )
        result = await call_next(ctx)
        if context is None or (modern and result.get("isError")):
            return result  # not authenticated, or refused at once: the plain answer says why
        task_param = None if modern else params.get("task")  # 2026-07-28: ignored (SEP-2663)
        ttl = task_store.task_ttl_ms(
            task_param.get("ttl") if isinstance(task_param, dict) else None
        )
        call_result = {
            k: result[k] for k in ("content", "structuredContent", "isError") if k in result
        }
        task = await sync_to_async(task_store.task_create)(
            context=context, tool=name, protocol_version=version, ttl_ms=ttl, result=call_result
        )
        logger.info(
            "mcp task created",
            extra={
                "task_id": str(task.pk),
                "tool": name,
                "user_id": context.user_id,
                "client_id": context.client_id,
                "protocol_version": version,
                "task_status": task.status,
            },
        )
        if modern:
            return {"resultType": "task", **modern_task(task)}
        if not task.is_terminal:
            self._sessions[str(task.pk)].add(ctx.session)
        return {"task": legacy_task(task), "_meta": {IMMEDIATE_RESPONSE: task.status_message}}

    # --- methods ----------------------------------------------------------------------------

    async def _read(self, task_id: str) -> McpTask:
        context = await self._context()
        try:
            return await sync_to_async(task_store.task_get)(context=context, task_id=task_id)
        except TaskError as exc:
            raise _invalid(exc) from None

    async def _get(self, ctx, params: types.GetTaskRequestParams) -> dict[str, Any]:
        task = await self._read(params.task_id)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return {"resultType": "complete", **modern_task(task)}
        if not task.is_terminal:  # nothing more will be said about an ended task
            self._sessions[str(task.pk)].add(ctx.session)
        return legacy_task(task)

    async def _result(self, ctx, params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise _not_in_revision("tasks/result", ctx.protocol_version)
        waiter = anyio.Event()
        self._waiters[params.task_id].add(waiter)
        try:
            while True:
                task = await self._read(params.task_id)
                if task.is_terminal:
                    return {**task.result, "_meta": {RELATED_TASK: {"taskId": str(task.pk)}}}
                # Woken by the task's next event; re-read now and then in case one was missed.
                with anyio.move_on_after(settings.MCP_TASK_POLL_INTERVAL_MS / 1000):
                    await waiter.wait()
                self._waiters[params.task_id].discard(waiter)
                waiter = anyio.Event()
                self._waiters[params.task_id].add(waiter)
        finally:
            _forget(self._waiters, params.task_id, waiter)

    async def _list(self, ctx, params: types.PaginatedRequestParams) -> dict[str, Any]:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            raise _not_in_revision("tasks/list", ctx.protocol_version)
        context = await self._context()
        try:
            tasks, cursor = await sync_to_async(task_store.tasks_list)(
                context=context, cursor=params.cursor
            )
        except TaskError as exc:
            raise _invalid(exc) from None
        answer: dict[str, Any] = {"tasks": [legacy_task(task) for task in tasks]}
        if cursor:
            answer["nextCursor"] = cursor
        return answer

    async def _cancel(self, ctx, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        context = await self._context()
        try:
            task = await sync_to_async(task_store.task_cancel)(
                context=context, task_id=params.task_id
            )
        except TaskError as exc:
            raise _invalid(exc) from None
        logger.info(
            "mcp task cancelled",
            extra={
                "task_id": str(task.pk),
                "user_id": context.user_id,
                "client_id": context.client_id,
                "task_status": task.status,
            },
        )
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return {}  # an acknowledgement; the task says `cancelled` on its next read
        return legacy_task(task)

    async def _update(self, ctx, params: UpdateTaskParams) -> dict[str, Any]:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise _not_in_revision("tasks/update", ctx.protocol_version)
        # Our tasks never ask for input (README: why the signature is `working`), so every
        # response is for a key that is not outstanding: ignored, as SEP-2663 says.
        await self._read(params.task_id)
        return {}

    # --- push -------------------------------------------------------------------------------

    async def on_event(self, event: dict[str, Any]) -> None:
        """A published transition (core.events): re-project the tasks that follow its entity
        and tell whoever listens. Never raises (it runs in the server's one event pump)."""
        if event.get("lifecycle") not in task_store.KINDS or not event.get("id"):
            return
        try:
            tasks = await sync_to_async(task_store.tasks_following)(
                kind=event["lifecycle"], entity_id=event["id"]
            )
        except Exception:  # noqa: BLE001 - the pump must keep running
            logger.warning("could not refresh the tasks of %s", event, exc_info=True)
            return
        for task in tasks:
            await self.publish(task)

    async def publish(self, task: McpTask) -> None:
        task_id = str(task.pk)
        for waiter in list(self._waiters.get(task_id, ())):
            waiter.set()
        for stream in list(self._streams.get(task_id, ())):
            try:
                stream.send_nowait(task)
            except (anyio.WouldBlock, anyio.ClosedResourceError):
                _forget(self._streams, task_id, stream)
        note = _Notification(method="notifications/tasks/status", params=legacy_task(task))
        for session in list(self._sessions.get(task_id, ())):
            try:
                await session.send_notification(note)
            except Exception:  # noqa: BLE001 - a closed session: forget it
                _forget(self._sessions, task_id, session)
        if task.is_terminal:
            self._sessions.pop(task_id, None)

    # --- subscriptions/listen with taskIds (2026-07-28) ------------------------------------

    @staticmethod
    def requested_task_ids(params: types.SubscriptionsListenRequestParams) -> list[str] | None:
        extra = params.notifications.model_extra or {}
        ids = extra.get("taskIds")
        if ids is None:
            return None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise MCPError(types.INVALID_PARAMS, "notifications.taskIds must be a list of strings")
        return list(dict.fromkeys(ids))

    async def listen(self, ctx, params, *, task_ids: list[str], uris: list[str], bus, limit: int):
        """One listen stream for resource updates (`uris`, already checked) and task status
        (`task_ids`, kept to the caller's own live tasks), acknowledged first, as the SDK's."""
        if not _declares_extension(ctx.meta):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Missing required client capability",
                {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            )
        if len(task_ids) > limit:
            raise MCPError(types.INVALID_PARAMS, f"At most {limit} task ids per stream")
        context = await self._context()
        honored = []
        for task_id in task_ids:
            try:
                await sync_to_async(task_store.task_get)(context=context, task_id=task_id)
                honored.append(task_id)
            except TaskError:
                pass  # another context's, unknown or expired: not followed, and not said why
        subscription_id = ctx.request_id
        if subscription_id is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        meta = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        acknowledged: dict[str, Any] = {"taskIds": honored}
        if uris:
            acknowledged["resourceSubscriptions"] = uris
        send, receive = anyio.create_memory_object_stream[Any](256)
        wanted = frozenset(uris)

        def deliver(event: Any) -> None:
            if isinstance(event, ResourceUpdated) and event.uri in wanted:
                try:
                    send.send_nowait(event)
                except (anyio.WouldBlock, anyio.ClosedResourceError):
                    pass

        unsubscribe = bus.subscribe(deliver)
        for task_id in honored:
            self._streams[task_id].add(send)
        try:
            await ctx.session.send_notification(
                _Notification(
                    method="notifications/subscriptions/acknowledged",
                    params={"notifications": acknowledged, "_meta": meta},
                ),
                related_request_id=subscription_id,
            )
            async for item in receive:
                if isinstance(item, ResourceUpdated):
                    note = _Notification(
                        method="notifications/resources/updated",
                        params={"uri": item.uri, "_meta": meta},
                    )
                else:
                    note = _Notification(
                        method="notifications/tasks", params={**modern_task(item), "_meta": meta}
                    )
                await ctx.session.send_notification(note, related_request_id=subscription_id)
        finally:
            unsubscribe()
            for task_id in honored:
                _forget(self._streams, task_id, send)
            send.close()
            receive.close()
        return {"_meta": meta}
