"""The durable MCP task store: services over `McpTask` rows and the lifecycles they follow.

Each task kind is one entry of `KINDS` (as healthchecks' transports: same methods, no
`if kind == …` chains): `read` the entity, `project` it onto a task status, message and result,
and `cancel` what can still be cancelled with the existing services. A task is readable only in
the authorization context that created it (user + OAuth application); another context's task,
an unknown id and an expired one all raise `TaskNotFound` (the expired one says so only to its
own context). Terminal projections are written once, by a conditional UPDATE, so the mapping is
one way."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from oauth2_provider.models import get_access_token_model

from actions import public as actions
from core.lifecycle import IllegalTransition
from mcp_adapter.models import TERMINAL, McpTask, TaskKind, TaskStatus
from messaging import public as messaging
from operations import public as operations


class TaskError(Exception):
    """A task request the protocol answers with -32602 (Invalid params), in these words."""


class TaskNotFound(TaskError):
    pass


class TaskNotCancellable(TaskError):
    pass


@dataclass(frozen=True)
class AuthContext:
    """Who asks: the access token's user and OAuth application (the authorization context)."""

    user_id: int
    application_id: int
    client_id: str
    client_name: str


def auth_context_for_token(token: str | None) -> AuthContext | None:
    if not token:
        return None
    checksum = hashlib.sha256(token.encode()).hexdigest()
    found = (
        get_access_token_model()
        .objects.select_related("application")
        .filter(token_checksum=checksum)
        .first()
    )
    if found is None or not found.is_valid() or found.application is None:
        return None
    return AuthContext(
        user_id=found.user_id,
        application_id=found.application_id,
        client_id=found.application.client_id,
        client_name=found.application.name,
    )


@dataclass(frozen=True)
class Projection:
    status: str
    message: str
    is_error: bool = False


def tool_result(payload: dict[str, Any], *, is_error: bool, note: str = "") -> dict[str, Any]:
    """The CallToolResult (wire form) the call ends with: the status tool's JSON, structured
    and as text, with a sentence before it when the JSON alone could be misread."""
    text = json.dumps(payload)
    return {
        "content": [{"type": "text", "text": f"{note}\n{text}" if note else text}],
        "structuredContent": payload,
        "isError": is_error,
    }


# --- kinds ---------------------------------------------------------------------------------


class ActionTasks:
    """transfer, swap, card_freeze, card_unfreeze, card_limit: the task is the action."""

    def read(self, entity_id):
        return actions.action_for_task(entity_id)

    def entity_id(self, body: dict[str, Any]) -> Any:
        return body.get("action_id")

    def project(self, action) -> Projection:
        S = actions.ActionStatus
        if action.status == S.PROPOSED:
            return Projection(
                TaskStatus.WORKING,
                f"Waiting for the user's passkey signature at {actions.action_sign_url(action)} "
                f"(until {action.expires_at:%Y-%m-%dT%H:%M:%SZ}).",
            )
        if action.status in (S.SIGNED, S.SUBMITTED, S.BROADCAST):
            return Projection(TaskStatus.WORKING, actions.action_progress_note(action))
        if action.status == S.EXECUTED:
            return Projection(TaskStatus.COMPLETED, "Executed.")
        if action.status == S.REJECTED:
            return Projection(TaskStatus.CANCELLED, "Declined: the action was rejected.", True)
        if action.status == S.EXPIRED:
            return Projection(TaskStatus.FAILED, "Expired before the user signed.", True)
        return Projection(TaskStatus.FAILED, f"Failed: {action.error or 'see the history'}", True)

    def payload(self, action) -> dict[str, Any]:
        return actions.action_status_payload(action)

    def cancel(self, action, *, task: McpTask, context: AuthContext) -> None:
        try:
            actions.action_agent_cancel(
                action_id=action.pk,
                detail=f"cancelled through MCP tasks/cancel by OAuth client "
                f"{context.client_name!r} ({context.client_id})",
            )
        except IllegalTransition as exc:
            if exc.current == actions.ActionStatus.BROADCAST:
                reason = "the user operation is already broadcast; it will execute or fail on chain"
            else:
                reason = f"the user already signed; the action is {exc.current}"
            raise TaskNotCancellable(f"Cannot cancel task: {reason}") from None


class DeliveryTasks:
    """sosoapi_dm_actions_send: the task ends when the delivery is sent, failed, cancelled or
    unknown; `unknown` is an error result that says not to re-send, never a success."""

    UNKNOWN_NOTE = (
        "Not known whether the message was sent: the provider did not answer in time. Do not "
        "re-send it; look it up later with sosoapi_dm_actions_status (staff resolve it)."
    )

    def read(self, entity_id):
        return messaging.delivery_by_id(entity_id)

    def entity_id(self, body: dict[str, Any]) -> Any:
        action = body.get("action")
        return action.get("id") if isinstance(action, dict) else None

    def project(self, delivery) -> Projection:
        D = messaging.DeliveryStatus
        working = {
            D.QUEUED: "Queued; waiting for a worker to send it.",
            D.CLAIMED: "Claimed by a worker; about to send.",
            D.SENDING: "Sending to the provider.",
        }
        if delivery.status in working:
            return Projection(TaskStatus.WORKING, working[delivery.status])
        if delivery.status == D.SENT:
            return Projection(
                TaskStatus.COMPLETED, f"Sent (provider message id {delivery.provider_message_id})."
            )
        if delivery.status == D.CANCELLED:
            return Projection(TaskStatus.CANCELLED, "Cancelled before it was sent.", True)
        if delivery.status == D.UNKNOWN:
            return Projection(TaskStatus.FAILED, self.UNKNOWN_NOTE, True)
        return Projection(TaskStatus.FAILED, f"Not sent: {delivery.reason or 'failed'}", True)

    def payload(self, delivery) -> dict[str, Any]:
        return messaging.delivery_payload(delivery)

    def cancel(self, delivery, *, task: McpTask, context: AuthContext) -> None:
        try:
            messaging.delivery_cancel(
                delivery=delivery,
                user=task.user,
                note=f"through MCP tasks/cancel by OAuth client {context.client_name!r} "
                f"({context.client_id})",
            )
        except IllegalTransition as exc:
            raise TaskNotCancellable(
                f"Cannot cancel task: the delivery is already {exc.current}; only a queued or "
                "claimed delivery can be cancelled"
            ) from None


class OperationTasks:
    """tong_operation_start: the task is the operation, through review and reconciliation to
    succeeded (completed), failed or cancelled. The message says in plain words what happens
    now, and why a review holds it."""

    def read(self, entity_id):
        return operations.operation_for_task(entity_id)

    def entity_id(self, body: dict[str, Any]) -> Any:
        return body.get("id")

    def project(self, operation) -> Projection:
        state, St = operation.state, operations.State
        unreachable = operations.backend_unreachable(operation)
        if state == St.QUEUED and unreachable:
            return Projection(
                TaskStatus.WORKING,
                "Waiting for the generation service: it cannot be reached, so nothing has been "
                "sent yet; the request goes out (once) when it is back.",
            )
        if state == St.QUEUED:
            return Projection(TaskStatus.WORKING, "Queued; waiting to be sent to the generator.")
        if state == St.NEEDS_REVIEW:
            review = operation.review or {}
            why = review.get("rule") or review.get("reason") or "policy"
            return Projection(
                TaskStatus.WORKING,
                f"Waiting for a reviewer: a staff member must approve it (review required by "
                f"{why}).",
            )
        if state == St.WAITING:
            return Projection(
                TaskStatus.WORKING, "Accepted by the generator; waiting for it to start generating."
            )
        if state == St.RUNNING:
            return Projection(TaskStatus.WORKING, "Generating.")
        if state == St.PAUSED:
            return Projection(
                TaskStatus.WORKING, "Paused by staff; it goes on when they resume it."
            )
        if state == St.RECONCILING and unreachable:
            return Projection(
                TaskStatus.WORKING,
                "Reconciling a lost acknowledgement, waiting for the generation service: it "
                "cannot be reached now; when it is back it is asked whether it received the "
                "request (it is never sent twice).",
            )
        if state == St.RECONCILING:
            return Projection(
                TaskStatus.WORKING,
                "Reconciling a lost acknowledgement: asking the generator whether it received "
                "the request (it is never sent twice).",
            )
        if state == St.SUCCEEDED:
            return Projection(
                TaskStatus.COMPLETED,
                f"Succeeded; {operation.usage_credits:.6f} credits used. Read the output with "
                "tong_operation_result.",
            )
        if state == St.CANCELLED:
            return Projection(TaskStatus.CANCELLED, "Cancelled; the hold was released.", True)
        if operation.billing_status == operations.BillingStatus.SETTLED:
            # Cut at its token limit: the generator did the work, and it was billed.
            return Projection(
                TaskStatus.FAILED,
                f"Failed: {operation.error_code or 'see the status'}; "
                f"{operation.wallet_debited_credits:.6f} credits charged, at most the hold.",
                True,
            )
        return Projection(
            TaskStatus.FAILED,
            f"Failed: {operation.error_code or 'see the status'}; the hold was released.",
            True,
        )

    def payload(self, operation) -> dict[str, Any]:
        return operations.operation_status_payload(operation)

    def cancel(self, operation, *, task: McpTask, context: AuthContext) -> None:
        try:
            operations.operation_cancel_by_owner(
                operation_id=operation.pk, owner=task.user, application=task.application
            )
        except operations.NotCancellable as exc:
            raise TaskNotCancellable(f"Cannot cancel task: {exc.message}") from None
        except IllegalTransition as exc:
            raise TaskNotCancellable(
                f"Cannot cancel task: the operation is {exc.current} now"
            ) from None


KINDS: dict[str, ActionTasks | DeliveryTasks | OperationTasks] = {
    TaskKind.ACTION: ActionTasks(),
    TaskKind.DELIVERY: DeliveryTasks(),
    TaskKind.OPERATION: OperationTasks(),
}
# The tools a client may call as a task, and the kind of work each one starts: every tool
# that proposes an action (the actions app's table of action types), and the DM send.
TASK_TOOLS: dict[str, str] = {
    **dict.fromkeys(actions.ACTION_TOOLS, TaskKind.ACTION),
    "sosoapi_dm_actions_send": TaskKind.DELIVERY,
    "tong_operation_start": TaskKind.OPERATION,
}


# --- services --------------------------------------------------------------------------------


def task_ttl_ms(requested: Any) -> int:
    """The TTL we keep a task for: the one asked for, within [1 s, MCP_TASK_MAX_TTL_MS]."""
    if isinstance(requested, int) and not isinstance(requested, bool) and requested > 0:
        return max(1000, min(requested, settings.MCP_TASK_MAX_TTL_MS))
    return settings.MCP_TASK_DEFAULT_TTL_MS


def task_create(
    *,
    context: AuthContext,
    tool: str,
    protocol_version: str,
    ttl_ms: int,
    result: dict[str, Any],
) -> McpTask:
    """A task over what the tool call just created (committed before it is returned: a
    tasks/get for its id resolves at once). A refused call is a task that failed at birth."""
    kind = TASK_TOOLS[tool]
    now = timezone.now()
    body = result.get("structuredContent") if not result.get("isError") else None
    entity_id = KINDS[kind].entity_id(body) if isinstance(body, dict) else None
    task = McpTask(
        user_id=context.user_id,
        application_id=context.application_id,
        tool=tool,
        kind=kind,
        entity_id=uuid.UUID(str(entity_id)) if entity_id else None,
        protocol_version=protocol_version,
        accepted=body,
        created_at=now,
        last_updated_at=now,
        ttl_ms=ttl_ms,
        expires_at=now + timedelta(milliseconds=ttl_ms),
    )
    if task.entity_id is None:
        text = " ".join(c.get("text", "") for c in result.get("content", []))
        task.status, task.status_message, task.result = TaskStatus.FAILED, text, result
    else:
        projection = KINDS[kind].project(KINDS[kind].read(task.entity_id))
        task.status, task.status_message = projection.status, projection.message
    task.save(force_insert=True)
    return task_refresh(task=task) if task.entity_id else task


def task_refresh(*, task: McpTask) -> McpTask:
    """Project the entity's status onto the task; a terminal projection is written once (the
    UPDATE only matches a task that is not terminal yet) together with its result."""
    if task.is_terminal or task.entity_id is None:
        return task
    kind = KINDS[task.kind]
    entity = kind.read(task.entity_id)
    projection = kind.project(entity)
    if projection.status == task.status and projection.message == task.status_message:
        return task
    updates: dict[str, Any] = {
        "status": projection.status,
        "status_message": projection.message,
        "last_updated_at": timezone.now(),
    }
    if projection.status in TERMINAL:
        note = projection.message if projection.is_error else ""
        updates["result"] = tool_result(
            kind.payload(entity), is_error=projection.is_error, note=note
        )
    McpTask.objects.filter(pk=task.pk).exclude(status__in=TERMINAL).update(**updates)
    task.refresh_from_db()
    return task


def _task_for(*, context: AuthContext, task_id: Any, now: datetime | None = None) -> McpTask:
    try:
        pk = uuid.UUID(str(task_id))
    except ValueError:
        raise TaskNotFound("Failed to retrieve task: Task not found") from None
    task = (
        McpTask.objects.select_related("user")
        .filter(pk=pk, user_id=context.user_id, application_id=context.application_id)
        .first()
    )
    if task is None:
        raise TaskNotFound("Failed to retrieve task: Task not found")
    if task.expires_at <= (now or timezone.now()):
        raise TaskNotFound("Failed to retrieve task: Task has expired")
    return task


def task_get(*, context: AuthContext, task_id: Any) -> McpTask:
    return task_refresh(task=_task_for(context=context, task_id=task_id))


def task_cancel(*, context: AuthContext, task_id: Any) -> McpTask:
    """Cancel the work behind the task with the existing services, then read the task again
    (it is `cancelled` once the entity's cancellation is committed)."""
    task = task_get(context=context, task_id=task_id)
    if task.is_terminal:
        raise TaskNotCancellable(f"Cannot cancel task: already in terminal status '{task.status}'")
    kind = KINDS[task.kind]
    kind.cancel(kind.read(task.entity_id), task=task, context=context)
    return task_refresh(task=task)


def tasks_list(
    *, context: AuthContext, cursor: str | None = None, limit: int | None = None
) -> tuple[list[McpTask], str | None]:
    """The context's live tasks, newest first, keyset-paged by an opaque cursor."""
    limit = limit or settings.MCP_TASK_PAGE_SIZE
    rows = McpTask.objects.filter(
        user_id=context.user_id,
        application_id=context.application_id,
        expires_at__gt=timezone.now(),
    ).order_by("-created_at", "-id")
    if cursor is not None:
        created_at, pk = _decode_cursor(cursor)
        rows = rows.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = [task_refresh(task=task) for task in page[:limit]]
    return page, _encode_cursor(page[-1]) if more else None


def _encode_cursor(task: McpTask) -> str:
    raw = f"{task.created_at.isoformat()}|{task.pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created_at, pk = raw.split("|")
        when = datetime.fromisoformat(created_at)
        if when.tzinfo is None:
            raise ValueError("naive")
        return when, uuid.UUID(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise TaskError("Invalid cursor") from None


def tasks_live_room(*, context: AuthContext) -> bool:
    """Whether the context may start one more task (MCP_TASK_MAX_LIVE in progress at most).
    Rows are re-projected first when the count is at the limit: a task whose work ended while
    nobody read it must not hold a place."""
    live = McpTask.objects.filter(
        user_id=context.user_id,
        application_id=context.application_id,
        expires_at__gt=timezone.now(),
    ).exclude(status__in=TERMINAL)
    limit = settings.MCP_TASK_MAX_LIVE
    if live.count() < limit:
        return True
    for task in live[: limit + 1]:
        task_refresh(task=task)
    return live.count() < limit


def tasks_following(*, kind: str, entity_id: Any) -> list[McpTask]:
    """The live tasks over one entity, refreshed: what a published transition changed."""
    try:
        pk = uuid.UUID(str(entity_id))
    except ValueError:
        return []
    rows = McpTask.objects.filter(kind=kind, entity_id=pk, expires_at__gt=timezone.now())
    return [task_refresh(task=task) for task in rows]


def tasks_purge_expired(*, now: datetime | None = None, limit: int = 5000) -> int:
    """Delete tasks past their TTL (beat, `mcp-tasks-purge-expired`). Reads refuse them
    already; this frees the rows."""
    now = now or timezone.now()
    ids = list(McpTask.objects.filter(expires_at__lte=now).values_list("pk", flat=True)[:limit])
    deleted, _ = McpTask.objects.filter(pk__in=ids).delete()
    return deleted
