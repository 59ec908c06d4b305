"""Generation operations over MCP on real streamable HTTP with the official Python SDK client:
quote, start as a Task, needs_review, approval through the console's staff move, succeeded,
result; cancel with the hold released; the refusals that hold nothing; a lost acknowledgement
reported as reconciling; every status answer checked against the seed with a date-time
checker that checks."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from jsonschema import Draft7Validator, FormatChecker

from console.moves import MOVES, apply_move
from dev.providers.local_openai import LocalResponsesServer
from mcp_adapter.models import McpTask
from mcp_adapter.tests.conftest import run
from operations import billing
from operations.contract import OPERATION_STATUS_SCHEMA, QUOTE_SCHEMA, RESULT_SCHEMA
from operations.models import LedgerEntry, Operation, Quote, State, Wallet
from operations.services import backend_unreachable, operations_process_due
from operations.tests.factories import fund

pytestmark = pytest.mark.django_db(transaction=True)
EXTENSION = "io.modelcontextprotocol/tasks"
SCOPES = "operations:read operations:write"
CHECKER = FormatChecker()
STATUS = Draft7Validator(OPERATION_STATUS_SCHEMA, format_checker=CHECKER)


def test_the_date_time_checker_checks():
    # Without rfc3339-validator installed jsonschema lets any string through as date-time.
    assert not CHECKER.conforms("2026-13-45T99:00:00Z", "date-time")
    assert CHECKER.conforms("2026-10-22T09:00:00Z", "date-time")
    bad = {"type": "string", "format": "date-time"}
    assert list(Draft7Validator(bad, format_checker=CHECKER).iter_errors("yesterday"))


def seed_valid(body: dict[str, Any]) -> dict[str, Any]:
    errors = [e.message for e in STATUS.iter_errors(body)]
    assert errors == [], errors
    return body


@pytest.fixture
def backend(settings):
    with LocalResponsesServer(api_key="k", work_seconds=0.2) as server:
        settings.OPERATIONS_BACKEND_URL = server.url
        settings.OPERATIONS_BACKEND_API_KEY = "k"
        settings.OPERATIONS_BACKEND_TIMEOUT_SECONDS = 1.0
        settings.OPERATIONS_POLL_SECONDS = 0.0
        settings.OPERATIONS_REVIEW_RULES = ["category:reviewed"]
        yield server


@pytest.fixture
def agent(user, application, make_token):
    fund(user, "100")
    return make_token(user, application, scope=SCOPES)


def sdk(url: str, token: str, *calls, tasks=None):
    """Run `calls` ((tool, arguments) pairs) with the official SDK client over streamable HTTP;
    `tasks`: a ClientExtension that resolves task handles (the start as a Task)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main():
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http_client:
            transport = streamable_http_client(url, http_client=http_client)
            extensions = [tasks] if tasks else []
            async with Client(transport, extensions=extensions) as client:
                return [await client.call_tool(name, arguments) for name, arguments in calls]

    return run(main)


def task_extension(seen: list[dict[str, Any]]):
    """The SDK's extension hook driving tasks/get until the task ends (as in test_tasks)."""
    import anyio
    import mcp_types as types
    from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
    from mcp_operation import (  # docs/examples: the models the example polls with
        GetTask,
        TaskHandle,
    )
    from pydantic import TypeAdapter

    async def resolve(handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
        deadline = time.monotonic() + 60  # a failed helper thread must not leave it polling
        while time.monotonic() < deadline:
            task = await ctx.session.send_request(
                GetTask(params={"taskId": handle.task_id}), TypeAdapter(dict[str, Any])
            )
            seen.append(task)
            if task["status"] in ("completed", "failed", "cancelled"):
                return types.CallToolResult.model_validate(task["result"])
            await anyio.sleep(0.05)
        raise AssertionError(f"the task did not end: {seen[-1:]}")

    class Tasks(ClientExtension):
        identifier = EXTENSION

        def claims(self):
            return [ResultClaim(result_type="task", model=TaskHandle, resolve=resolve)]

    return Tasks()


def quote_args(text: str = "Write a haiku about picnics") -> dict[str, Any]:
    return {
        "tool": "text-gen",
        "submit_field": "prompt",
        "submit_value": text,
        "configuration": {"max_output_tokens": 1000},
    }


def start_args(quote_id: str, category: str = "reviewed", key: str | None = None) -> dict:
    return {
        "tool": "text-gen",
        "category": category,
        "quote_id": quote_id,
        "idempotency_key": key or str(uuid.uuid4()),
    }


def start_while(worker, url: str, token: str, seen: list, revived: list, *prompt: str):
    """Quote, then start a `plain` operation as a task over the SDK while `worker` runs in a
    thread (the beat, the backend going down and coming back); the backends it revived are
    stopped after. The start's answer."""
    (quote,) = sdk(url, token, ("tong_operation_quote", quote_args(*prompt)))
    thread = threading.Thread(target=worker)
    thread.start()
    try:
        (started,) = sdk(
            url,
            token,
            ("tong_operation_start", start_args(quote.structured_content["id"], "plain")),
            tasks=task_extension(seen),
        )
    finally:
        thread.join()
        for server in revived:
            server.stop()
    return started


def worker_until(operation_filter, *, until: set[str], timeout: float = 20) -> Operation:
    """The beat's work (real services against the local backend) until the operation ends."""
    deadline = time.monotonic() + timeout
    while True:
        operation = Operation.objects.filter(**operation_filter).first()
        if operation is not None and operation.state in until:
            return operation
        assert time.monotonic() < deadline, operation and operation.state
        operations_process_due()
        time.sleep(0.05)


def test_quote_start_as_a_task_review_approval_succeeded_result(
    http_server, backend, agent, user, staff_user
):
    seen: list[dict[str, Any]] = []
    reviewed = threading.Event()

    def staff_and_worker():
        # Staff approve in the console once the agent has seen the task wait for a reviewer.
        deadline = time.monotonic() + 20
        while not any("Waiting for a reviewer" in t.get("statusMessage", "") for t in seen):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        operation = Operation.objects.get(owner=user)
        outcome = apply_move(
            move=MOVES["operation:approve"],
            key=f"operation:{operation.pk}",
            entity=operation,
            user=staff_user,
            note="fine to run",
            extra={},
        )
        assert outcome.ok, outcome.text
        reviewed.set()
        worker_until({"pk": operation.pk}, until={State.SUCCEEDED, State.FAILED})

    with http_server(output_schemas=True) as http:
        (quote,) = sdk(http.url, agent.token, ("tong_operation_quote", quote_args()))
        assert quote.is_error is False, quote.content
        body = quote.structured_content
        assert not list(Draft7Validator(QUOTE_SCHEMA, format_checker=CHECKER).iter_errors(body))
        assert body["breakdown"]["total_credits"] == body["quoted_credits"]
        assert body["breakdown"]["max_output_tokens"] == 1000

        thread = threading.Thread(target=staff_and_worker)
        thread.start()
        (started,) = sdk(
            http.url,
            agent.token,
            ("tong_operation_start", start_args(body["id"])),
            tasks=task_extension(seen),
        )
        thread.join()
        assert reviewed.is_set()
        assert started.is_error is False, started.content
        final = seed_valid(started.structured_content)
        assert final["state"] == "succeeded" and final["channel"] == "mcp"
        messages = [t["statusMessage"] for t in seen]
        assert any("review required by category:reviewed" in m for m in messages)
        assert seen[-1]["status"] == "completed"

        operation_id = final["id"]
        status, result = sdk(
            http.url,
            agent.token,
            ("tong_operation_status", {"operation_id": operation_id}),
            ("tong_operation_result", {"operation_id": operation_id}),
        )
    seed_valid(status.structured_content)
    assert not list(
        Draft7Validator(RESULT_SCHEMA, format_checker=CHECKER).iter_errors(
            result.structured_content
        )
    )
    assert result.structured_content["ready"] is True
    assert result.structured_content["result"]["output_text"]
    operation = Operation.objects.get(pk=operation_id)
    assert operation.channel == "mcp" and str(operation.quote_id) == body["id"]
    assert operation.held_credits == Decimal(body["quoted_credits"])
    assert billing.invariants(operation) == []
    assert billing.wallet_invariants(Wallet.objects.get(owner=user)) == []
    history = list(operation.history.order_by("timestamp", "id").values_list("status", flat=True))
    assert history[:3] == ["queued", "needs_review", "queued"] and history[-1] == "succeeded"
    task = McpTask.objects.get(entity_id=operation.pk)
    assert task.kind == "operation" and task.status == "completed"


def test_cancel_in_review_releases_the_hold(http_server, backend, agent, user):
    with http_server(output_schemas=True) as http:
        (quote,) = sdk(http.url, agent.token, ("tong_operation_quote", quote_args()))
        quote_id = quote.structured_content["id"]
        (started,) = sdk(http.url, agent.token, ("tong_operation_start", start_args(quote_id)))
        op = seed_valid(started.structured_content)
        assert op["state"] == "needs_review"
        assert Wallet.objects.get(owner=user).held_credits == Decimal(
            quote.structured_content["quoted_credits"]
        )
        cancelled, again, result = sdk(
            http.url,
            agent.token,
            ("tong_operation_cancel", {"operation_id": op["id"]}),
            ("tong_operation_cancel", {"operation_id": op["id"]}),
            ("tong_operation_result", {"operation_id": op["id"]}),
        )
    body = seed_valid(cancelled.structured_content)
    assert body["state"] == "cancelled" and body["billing"]["status"] == "released"
    assert again.is_error is True
    assert "is cancelled; only a queued, waiting, paused" in again.content[0].text
    assert result.structured_content["ready"] is False
    wallet = Wallet.objects.get(owner=user)
    assert wallet.held_credits == 0 and wallet.available_credits == Decimal("100")
    assert LedgerEntry.objects.filter(operation_id=op["id"], kind="release").count() == 1
    assert billing.invariants(Operation.objects.get(pk=op["id"])) == []


def test_another_agent_of_the_user_can_neither_read_nor_cancel_the_operation(
    http_server, backend, agent, user, make_application, make_token
):
    """Operations are per agent, as actions are (seed 000)."""
    agent_b = make_token(user, make_application("agent-b"), scope=SCOPES)
    with http_server(output_schemas=True) as http:
        (quote,) = sdk(http.url, agent.token, ("tong_operation_quote", quote_args()))
        quote_id = quote.structured_content["id"]
        (started,) = sdk(http.url, agent.token, ("tong_operation_start", start_args(quote_id)))
        op_id = started.structured_content["id"]
        by_id = {"operation_id": op_id}
        answers_b = sdk(
            http.url,
            agent_b.token,
            ("tong_operation_status", by_id),
            ("tong_operation_result", by_id),
            ("tong_operation_cancel", by_id),
        )
        untouched = Operation.objects.get(pk=op_id)
        status_a, cancelled_a = sdk(
            http.url,
            agent.token,
            ("tong_operation_status", by_id),
            ("tong_operation_cancel", by_id),
        )
    for answer in answers_b:
        assert answer.is_error is True
        assert f"Operation not found: {op_id}" in answer.content[0].text
    assert untouched.state == "needs_review" and untouched.pending_credits > 0
    assert seed_valid(status_a.structured_content)["state"] == "needs_review"
    assert seed_valid(cancelled_a.structured_content)["state"] == "cancelled"
    ended = Operation.objects.get(pk=op_id)
    assert list(ended.ledger.values_list("kind", flat=True)) == ["hold", "release"]
    assert Wallet.objects.get(owner=user).held_credits == 0


def test_start_refusals_hold_nothing_and_a_repeat_returns_the_same_operation(
    http_server, backend, agent, user, other_user, settings
):
    held_before = Wallet.objects.get(owner=user).held_credits
    foreign = Quote.objects.create(
        owner=other_user,
        tool="text-gen",
        submit_field="prompt",
        submit_value="x",
        quoted_credits=Decimal("1"),
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    with http_server(output_schemas=True) as http:
        (q1, q2, q3) = sdk(
            http.url,
            agent.token,
            ("tong_operation_quote", quote_args()),
            ("tong_operation_quote", quote_args()),
            (
                "tong_operation_quote",
                {**quote_args(), "configuration": {"max_output_tokens": 999999}},
            ),
        )
        expired_id, used_id, costly_id = (q.structured_content["id"] for q in (q1, q2, q3))
        Quote.objects.filter(pk=expired_id).update(expires_at=timezone.now() - timedelta(seconds=1))
        # The price changes after the quote: the quote still holds its own price.
        quoted = Decimal(q2.structured_content["quoted_credits"])
        settings.OPERATIONS_PRICES = {k: "999" for k in settings.OPERATIONS_PRICES}
        key = str(uuid.uuid4())
        calls = [
            ("tong_operation_start", start_args(expired_id)),
            ("tong_operation_start", start_args(str(foreign.pk))),
            ("tong_operation_start", start_args(costly_id)),
            ("tong_operation_start", start_args(used_id, category="plain", key=key)),
            ("tong_operation_start", start_args(used_id, category="plain", key=key)),
            ("tong_operation_start", start_args(used_id, category="plain")),
            ("tong_operation_start", {**start_args(used_id), "quote_id": "not-a-uuid"}),
            ("tong_operation_start", {"tool": "text-gen", "category": "c", "quote_id": used_id}),
            ("tong_operation_quote", {**quote_args(), "configuration": {"max_output_tokens": 0}}),
        ]
        answers = sdk(http.url, agent.token, *calls)
    expired, foreign_a, costly, first, repeat, used, bad_id, no_key, bad_quote = answers
    assert expired.is_error and "expired at" in expired.content[0].text
    assert foreign_a.is_error and f"Quote not found: {foreign.pk}" in foreign_a.content[0].text
    assert costly.is_error and "needs a hold of" in costly.content[0].text
    assert first.is_error is False and repeat.is_error is False
    assert first.structured_content["id"] == repeat.structured_content["id"]
    assert used.is_error and "was already used" in used.content[0].text
    assert bad_id.is_error and "quote_id" in bad_id.content[0].text
    assert no_key.is_error and "idempotency_key" in no_key.content[0].text
    assert bad_quote.is_error and "max_output_tokens" in bad_quote.content[0].text
    # One operation, holding the quoted price, not the new one.
    (operation,) = Operation.objects.filter(owner=user)
    assert operation.held_credits == quoted and operation.idempotency_key == key
    wallet = Wallet.objects.get(owner=user)
    assert wallet.held_credits == held_before + quoted
    assert billing.wallet_invariants(wallet) == []


def wait_for_message(seen: list[dict[str, Any]], text: str, *, after: int = 0) -> dict:
    """The first task the agent polled (from `after` on) whose status message has `text`."""
    deadline = time.monotonic() + 20
    while True:
        found = [t for t in seen[after:] if text in t.get("statusMessage", "")]
        if found:
            return found[0]
        assert time.monotonic() < deadline, seen[-1:]
        time.sleep(0.05)


def test_a_backend_down_at_dispatch_is_waited_for_and_the_task_ends_when_it_is_back(
    http_server, backend, agent, user
):
    """The backend refuses connections (stopped) when the operation is dispatched: nothing
    was sent, so there is nothing to reconcile. It stays queued with its hold, the task says
    it waits for the generation service, and when the backend is back (same address) the
    request goes out once and the same task completes."""
    seen: list[dict[str, Any]] = []
    backend.stop()  # down: connections to its address are refused
    revived: list[LocalResponsesServer] = []

    def worker():
        worker_until({"owner": user}, until={State.QUEUED})
        deadline = time.monotonic() + 20
        while not backend_unreachable(Operation.objects.get(owner=user)):
            assert time.monotonic() < deadline
            operations_process_due()
            time.sleep(0.05)
        wait_for_message(seen, "Waiting for the generation service")
        for _ in range(3):  # the beat tries again and again while it is down
            operations_process_due()
        down = Operation.objects.get(owner=user)
        assert (down.state, down.dispatch_status, down.billing_status) == (
            "queued",
            "pending",
            "pending",
        )
        assert "could not connect" in down.last_error and backend.creates == []
        assert billing.invariants(down) == []
        assert Wallet.objects.get(owner=user).held_credits == down.held_credits > 0
        polled = len(seen)
        wait_for_message(seen, "nothing has been sent yet", after=polled)  # still waiting
        revived.append(backend.restarted())
        worker_until({"owner": user}, until={State.SUCCEEDED, State.FAILED})

    with http_server(output_schemas=True) as http:
        started = start_while(worker, http.url, agent.token, seen, revived)
    final = seed_valid(started.structured_content)
    assert final["state"] == "succeeded" and final["dispatch_status"] == "acknowledged"
    messages = [t["statusMessage"] for t in seen]
    waiting = next(m for m in messages if "generation service" in m)
    assert waiting == (
        "Waiting for the generation service: it cannot be reached, so nothing has been sent "
        "yet; the request goes out (once) when it is back."
    )
    assert seen[-1]["status"] == "completed" and messages[-1].startswith("Succeeded;")
    operation = Operation.objects.get(owner=user)
    history = list(operation.history.order_by("timestamp", "id").values_list("status", flat=True))
    assert "reconciling" not in history and history[-1] == "succeeded"
    assert operation.last_error == "" and operation.billing_status == "settled"
    assert [c["key"] for c in backend.creates] == [str(operation.pk)]  # sent once
    assert McpTask.objects.get(entity_id=operation.pk).status == "completed"
    assert billing.invariants(operation) == []
    assert billing.wallet_invariants(Wallet.objects.get(owner=user)) == []


def test_a_lost_acknowledgement_is_reported_as_reconciling_until_the_backend_answers(
    http_server, backend, agent, user
):
    """The backend accepts the request and drops the connection before answering: the
    outcome is unknown, so the operation reconciles. Then the backend goes down (stopped):
    the task says it is reconciling and waits for the generation service; when it is back
    with its store, the same Idempotency-Key finds the response it accepted, and the
    operation and the task end."""
    seen: list[dict[str, Any]] = []
    revived: list[LocalResponsesServer] = []

    def worker():
        worker_until({"owner": user}, until={State.RECONCILING})
        wait_for_message(seen, "Reconciling a lost acknowledgement: asking the generator")
        backend.stop()  # the backend is down now: the operation stays reconciling
        for _ in range(3):
            operations_process_due()
        stuck = Operation.objects.get(owner=user)
        assert stuck.state == State.RECONCILING and backend_unreachable(stuck)
        assert "could not connect" in stuck.last_error
        assert billing.invariants(stuck) == []
        task = wait_for_message(seen, "Reconciling a lost acknowledgement, waiting for the")
        assert task["status"] == "working"
        revived.append(backend.restarted())  # it is back: the operation ends
        worker_until({"owner": user}, until={State.SUCCEEDED, State.FAILED})

    with http_server() as http:
        started = start_while(worker, http.url, agent.token, seen, revived, "[lose-ack] go")
    assert seed_valid(started.structured_content)["state"] == "succeeded"
    assert seen[-1]["status"] == "completed"
    operation = Operation.objects.get(owner=user)
    assert "reconciling" in operation.history.order_by("timestamp", "id").values_list(
        "status", flat=True
    )
    assert len(backend.responses) == 1  # sent twice under one key, generated once
    assert {c["key"] for c in backend.creates} == {str(operation.pk)}
    assert billing.invariants(operation) == []
    assert billing.wallet_invariants(Wallet.objects.get(owner=user)) == []


def test_a_subscriber_to_the_operation_hears_every_state_change(
    make_server, agent, user, staff_user, settings, other_user, application, make_token
):
    import json

    import anyio
    import mcp_types as types
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from operations.decisions import operation_review_decide
    from operations.services import operation_cancel_by_owner, operation_dispatch, quote_create

    settings.OPERATIONS_REVIEW_RULES = ["category:reviewed"]
    quote = quote_create(
        owner=user, application=application, tool="text-gen", submit_field="p", submit_value="Hi"
    )
    from operations.services import operation_submit

    operation = operation_submit(
        owner=user,
        application=application,
        tool="text-gen",
        category="reviewed",
        channel="mcp",
        quote_id=quote.pk,
    )
    uri = f"tong://operation/{operation.pk}"
    received: list[str] = []

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            received.append(str(message.params.uri))

    def moves():
        operation_review_decide(
            operation_id=operation.pk, staff_user=staff_user, approve=True, note="ok"
        )
        with LocalResponsesServer(api_key="k", work_seconds=3600) as backend:
            settings.OPERATIONS_BACKEND_URL, settings.OPERATIONS_BACKEND_API_KEY = backend.url, "k"
            assert operation_dispatch(operation_id=operation.pk) == "waiting"
            operation_cancel_by_owner(
                operation_id=operation.pk, owner=user, application=operation.application
            )

    server = make_server(agent.token)

    async def body():
        async with server.event_pump():
            async with Client(server, mode="legacy", message_handler=on_message) as client:
                read = await client.read_resource(uri)
                assert json.loads(read.contents[0].text)["state"] == "needs_review"
                await client.subscribe_resource(uri)
                await anyio.to_thread.run_sync(moves)
                # queued (approved), dispatch started, waiting, cancelled.
                with anyio.fail_after(5):
                    while len(received) < 4:
                        await anyio.sleep(0.05)

    run(body)
    assert set(received) == {uri} and len(received) >= 4
    assert Operation.objects.get(pk=operation.pk).state == State.CANCELLED

    intruder = make_token(other_user, application, scope=SCOPES)

    async def foreign():
        async with Client(make_server(intruder.token), mode="legacy") as client:
            with pytest.raises(MCPError) as raised:
                await client.subscribe_resource(uri)
            return str(raised.value)

    assert f"Operation not found: {operation.pk}" in run(foreign)


def test_a_2025_11_25_task_start_waits_for_review_and_tasks_cancel_releases_the_hold(
    http_server, backend, agent, user
):
    from mcp_adapter.tests.test_tasks import LEGACY, HttpRpc

    with http_server() as http:
        rpc = HttpRpc(http.url, agent.token, LEGACY)
        tools = {t["name"]: t for t in rpc.call("tools/list")["result"]["tools"]}
        assert tools["tong_operation_start"]["execution"] == {"taskSupport": "optional"}
        quote = rpc.call("tools/call", {"name": "tong_operation_quote", "arguments": quote_args()})
        quote_id = quote["result"]["structuredContent"]["id"]
        created = rpc.call(
            "tools/call",
            {"name": "tong_operation_start", "arguments": start_args(quote_id), "task": {}},
        )["result"]["task"]
        assert created["status"] == "working"
        assert created["statusMessage"].startswith("Waiting for a reviewer")
        assert Wallet.objects.get(owner=user).held_credits > 0
        cancelled = rpc.call("tasks/cancel", {"taskId": created["taskId"]})["result"]
        assert cancelled["status"] == "cancelled"
        result = rpc.call("tasks/result", {"taskId": created["taskId"]})["result"]
    body = seed_valid(result["structuredContent"])
    assert body["state"] == "cancelled" and body["billing"]["status"] == "released"
    assert Wallet.objects.get(owner=user).held_credits == 0
    assert billing.invariants(Operation.objects.get(pk=body["id"])) == []


def test_a_task_cut_at_its_token_limit_says_it_was_charged_not_released(
    backend, agent, user, application
):
    from dev.testing import wait_until
    from mcp_adapter.models import TaskKind, TaskStatus
    from mcp_adapter.task_store import KINDS
    from operations.services import (
        operation_check,
        operation_dispatch,
        operation_submit,
        quote_create,
    )

    quote = quote_create(
        owner=user,
        application=application,
        tool="text-gen",
        submit_field="p",
        submit_value="Hi",
        configuration={"max_output_tokens": 100},
    )
    op = operation_submit(
        owner=user, application=application, tool="text-gen", category="plain", quote_id=quote.pk
    )
    operation_dispatch(operation_id=op.pk)
    wait_until(lambda: operation_check(operation_id=op.pk) == State.FAILED, timeout=20)
    op = Operation.objects.get(pk=op.pk)
    assert (op.error_code, op.billing_status) == ("max_output_tokens", "settled")
    projection = KINDS[TaskKind.OPERATION].project(op)
    assert projection.status == TaskStatus.FAILED
    assert projection.message == (
        f"Failed: max_output_tokens; {op.held_credits:.6f} credits charged, at most the hold."
    )
