"""Every operation route with every scope: read only, write only, both, none. A reader never
sees a write route's 403 on a status path (GET /api/v1/operations/quotes is an id: 404)."""

from __future__ import annotations

import uuid

import pytest

from operations.models import Operation, State, Wallet
from operations.services import operation_submit, quote_create

SCOPES = {
    "read": "operations:read",
    "write": "operations:write",
    "both": "operations:read operations:write",
    "none": "read:actions",
}
MISSING = str(uuid.uuid4())


def _quote_body():
    return {"tool": "text-gen", "submit_field": "prompt", "submit_value": "Hello"}


# (method, path, body, {scope: (status, code)}); {op} is an operation of the caller in review.
ROUTES = [
    (
        "get",
        "operations/quotes",
        None,
        {"read": 404, "both": 404, "write": 403, "none": 403},
    ),
    ("get", "operations/not-a-uuid", None, {"read": 404, "both": 404, "write": 403, "none": 403}),
    ("get", f"operations/{MISSING}", None, {"read": 404, "both": 404, "write": 403, "none": 403}),
    ("get", "operations/{op}", None, {"read": 200, "both": 200, "write": 403, "none": 403}),
    ("get", "operations/{op}/result", None, {"read": 200, "both": 200, "write": 403, "none": 403}),
    (
        "get",
        f"operations/{MISSING}/result",
        None,
        {"read": 404, "both": 404, "write": 403, "none": 403},
    ),
    ("post", "quotes", "quote", {"write": 201, "both": 201, "read": 403, "none": 403}),
    ("post", "operations", "submit", {"write": 202, "both": 202, "read": 403, "none": 403}),
    (
        "post",
        f"operations/{MISSING}/cancel",
        None,
        {"write": 404, "both": 404, "read": 403, "none": 403},
    ),
    (
        "post",
        "operations/quotes/cancel",
        None,
        {"write": 404, "both": 404, "read": 403, "none": 403},
    ),
    ("post", "operations/{op}/cancel", None, {"write": 200, "both": 200, "read": 403, "none": 403}),
]


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize(("method", "path", "body", "expected"), ROUTES)
def test_every_route_with_every_scope(
    scope, method, path, body, expected, funded, application, make_token, api, settings
):
    settings.OPERATIONS_REVIEW_RULES = ["category:reviewed"]
    op = operation_submit(
        owner=funded, application=application, tool="text-gen", category="reviewed", input_text="x"
    )
    assert op.state == State.NEEDS_REVIEW
    token = make_token(funded, application, scope=SCOPES[scope])
    if body == "quote":
        body = _quote_body()
    elif body == "submit":
        quote = quote_create(
            owner=funded,
            application=application,
            tool="text-gen",
            submit_field="p",
            submit_value="Hi",
        )
        body = {"tool": "text-gen", "category": "reviewed", "quote_id": str(quote.pk)}
    target = path.replace("{op}", str(op.pk))
    response = api(method, target, token, body)
    status = expected[scope]
    assert response.status_code == status, response.content
    answer = response.json()
    if status >= 400:
        # The one error shape.
        assert {"detail", "code", "errors"} <= set(answer)
    if status == 403:
        needed = "operations:read" if method == "get" else "operations:write"
        assert answer["code"] == "insufficient_scope"
        assert answer["required_scopes"] == [needed]
    if status == 404:
        segment = target.split("/")[1]
        assert answer["detail"] == f"Operation not found: {segment}"
        assert answer["code"] == "not_found"
    held = Operation.objects.get(pk=op.pk)
    if target.endswith(f"{op.pk}/cancel") and status == 200:
        assert held.state == State.CANCELLED and held.pending_credits == 0
    else:
        assert held.state == State.NEEDS_REVIEW


def test_another_owners_operation_answers_like_a_missing_one_on_every_route(
    funded, other_user, application, make_token, api
):
    op = operation_submit(
        owner=funded, application=application, tool="text-gen", category="c", input_text="x"
    )
    theirs = make_token(other_user, application, scope=SCOPES["both"])
    for method, suffix in (("get", ""), ("get", "/result"), ("post", "/cancel")):
        mine = api(method, f"operations/{op.pk}{suffix}", theirs)
        missing = api(method, f"operations/{MISSING}{suffix}", theirs)
        assert mine.status_code == missing.status_code == 404
        assert mine.json()["detail"] == f"Operation not found: {op.pk}"
        assert mine.json()["code"] == missing.json()["code"]
    assert Operation.objects.get(pk=op.pk).state == State.QUEUED


def test_another_agents_operation_answers_like_a_missing_one_and_its_own_agent_still_can(
    funded, application, make_application, make_token, api
):
    """Operations are per agent, as actions are. Agent B of the
    same user cannot read, fetch the result of, or cancel agent A's operation."""
    op = operation_submit(
        owner=funded, application=application, tool="text-gen", category="c", input_text="x"
    )
    agent_b = make_token(funded, make_application("agent-b"), scope=SCOPES["both"])
    for method, suffix in (("get", ""), ("get", "/result"), ("post", "/cancel")):
        theirs = api(method, f"operations/{op.pk}{suffix}", agent_b)
        missing = api(method, f"operations/{MISSING}{suffix}", agent_b)
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json() == {**missing.json(), "detail": f"Operation not found: {op.pk}"}
        assert {"detail", "code", "errors"} <= set(theirs.json())
    untouched = Operation.objects.get(pk=op.pk)
    assert (untouched.state, untouched.pending_credits) == (State.QUEUED, op.held_credits)
    assert list(untouched.history.values_list("status", flat=True)) == ["queued"]
    assert list(untouched.ledger.values_list("kind", flat=True)) == ["hold"]

    agent_a = make_token(funded, application, scope=SCOPES["both"])
    assert api("get", f"operations/{op.pk}", agent_a).status_code == 200
    cancelled = api("post", f"operations/{op.pk}/cancel", agent_a)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    ended = Operation.objects.get(pk=op.pk)
    assert (ended.state, ended.pending_credits) == (State.CANCELLED, 0)
    assert list(ended.history.order_by("timestamp", "id").values_list("status", flat=True)) == [
        "queued",
        "cancelled",
    ]
    assert list(ended.ledger.values_list("kind", flat=True)) == ["hold", "release"]


def test_an_idempotency_key_is_the_agents_own(
    funded, application, make_application, make_token, api
):
    """The same key from another agent of the user starts its own operation; it never gets
    (or sees) the first agent's."""
    agent_a = make_token(funded, application, scope=SCOPES["both"])
    agent_b = make_token(funded, make_application("agent-b"), scope=SCOPES["both"])
    body = {"tool": "text-gen", "category": "c", "input": "x", "idempotency_key": "k-1"}
    first = api("post", "operations", agent_a, body)
    other = api("post", "operations", agent_b, body)
    again = api("post", "operations", agent_a, body)
    assert first.status_code == other.status_code == 202, other.content
    assert other.json()["id"] != first.json()["id"]
    assert again.json()["id"] == first.json()["id"]
    by_agent = dict(
        Operation.objects.filter(owner=funded).values_list("application__name", "idempotency_key")
    )
    assert by_agent == {"mcp-agent": "k-1", "agent-b": "k-1"}
    assert Operation.objects.filter(owner=funded).count() == 2


def test_another_agents_quote_is_not_found(funded, application, make_application, make_token, api):
    """A quote is its agent's: another agent of the user cannot spend it (and so use it up)."""
    agent_a = make_token(funded, application, scope=SCOPES["both"])
    agent_b = make_token(funded, make_application("agent-b"), scope=SCOPES["both"])
    quote = api("post", "quotes", agent_a, _quote_body()).json()
    body = {"tool": "text-gen", "category": "c", "quote_id": quote["id"]}
    refused = api("post", "operations", agent_b, body)
    assert refused.status_code == 422, refused.content
    assert refused.json()["detail"] == f"Quote not found: {quote['id']}"
    assert refused.json()["code"] == "quote_invalid"
    assert Operation.objects.count() == 0
    assert Wallet.objects.get(owner=funded).held_credits == 0
    started = api("post", "operations", agent_a, body)
    assert started.status_code == 202, started.content
    assert Operation.objects.get().application == application
