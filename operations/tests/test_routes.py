"""Every operation route with every scope: read only, write only, both, none. A reader never
sees a write route's 403 on a status path (GET /api/v1/operations/quotes is an id: 404)."""

from __future__ import annotations

import uuid

import pytest

from operations.models import Operation, State
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
        quote = quote_create(owner=funded, tool="text-gen", submit_field="p", submit_value="Hi")
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
