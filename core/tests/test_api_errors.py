"""One error body across the three apps' APIs (core.api): `{"detail", "code", "errors"}`,
for DRF's own refusals (401, 405, 415) as for the domain errors views raise, and documented as
one Error component in the OpenAPI schema."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from messaging.tests.conftest import member, social_account, workspace  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db

SCOPES = (
    "read:actions write:actions read:transactions agent:dm_read agent:dm_write "
    "operations:read operations:write"
)


@pytest.fixture
def ctx(client, member, social_account, application, make_token):  # noqa: F811
    token = make_token(member, application, scope=SCOPES)
    return {
        "client": client,
        "token": token.token,
        "narrow": make_token(member, application, scope="read:profile").token,
        "ids": {
            "workspace_id": str(social_account.workspace_id),
            "social_account_id": str(social_account.pk),
        },
    }


def call(ctx, method, path, body=None, *, token="token", content_type="application/json"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {ctx[token]}"} if token else {}
    data = json.dumps(body) if body is not None and content_type == "application/json" else body
    return getattr(ctx["client"], method)(path, data, content_type=content_type, **headers)


def dm_conflict(ctx):
    body = {**ctx["ids"], "recipient_id": "42", "text": "hi", "idempotency_key": str(uuid.uuid4())}
    assert call(ctx, "post", "/private-messaging-api/actions/send", body).status_code == 202
    return call(ctx, "post", "/private-messaging-api/actions/send", {**body, "text": "other"})


DM = "/private-messaging-api/actions"
CASES = {
    # actions
    "actions 400": (lambda c: call(c, "get", "/api/v1/transactions?limit=x"), "invalid_input"),
    "actions 401": (lambda c: call(c, "get", "/api/v1/card", token=None), "not_authenticated"),
    "actions 403": (
        lambda c: call(c, "get", "/api/v1/balances", token="narrow"),
        "insufficient_scope",
    ),
    "actions 404": (lambda c: call(c, "get", f"/api/v1/actions/{uuid.uuid4()}"), "not_found"),
    "actions 405": (lambda c: call(c, "put", "/api/v1/actions/transfer", {}), "method_not_allowed"),
    "actions 415": (
        lambda c: call(c, "post", "/api/v1/actions/card_freeze", "x", content_type="text/plain"),
        "unsupported_media_type",
    ),
    # messaging
    "messaging 400": (lambda c: call(c, "post", f"{DM}/status", {"bogus": 1}), "invalid_input"),
    "messaging 401": (lambda c: call(c, "post", f"{DM}/send", {}, token=None), "not_authenticated"),
    "messaging 403": (
        lambda c: call(c, "post", f"{DM}/send", {}, token="narrow"),
        "insufficient_scope",
    ),
    "messaging 404": (
        lambda c: call(c, "post", f"{DM}/status", {**c["ids"], "action_id": str(uuid.uuid4())}),
        "not_found",
    ),
    "messaging 405": (lambda c: call(c, "get", f"{DM}/status"), "method_not_allowed"),
    "messaging 409": (dm_conflict, "conflict"),
    "messaging 415": (
        lambda c: call(c, "post", f"{DM}/send", "x", content_type="text/plain"),
        "unsupported_media_type",
    ),
    # operations
    "operations 400": (
        lambda c: call(c, "post", "/api/v1/operations", {"tool": "t", "bogus": 1}),
        "invalid_input",
    ),
    "operations 401": (
        lambda c: call(c, "get", f"/api/v1/operations/{uuid.uuid4()}", token=None),
        "not_authenticated",
    ),
    "operations 402": (
        lambda c: call(
            c, "post", "/api/v1/operations", {"tool": "t", "category": "c", "input": "x"}
        ),
        "insufficient_credits",
    ),
    "operations 403": (
        lambda c: call(c, "post", "/api/v1/quotes", {}, token="narrow"),
        "insufficient_scope",
    ),
    "operations 404": (lambda c: call(c, "get", "/api/v1/operations/nope"), "not_found"),
    "operations 405": (lambda c: call(c, "delete", "/api/v1/operations", {}), "method_not_allowed"),
    "operations 415": (
        lambda c: call(c, "post", "/api/v1/operations", "x", content_type="text/plain"),
        "unsupported_media_type",
    ),
    "operations 422": (
        lambda c: call(
            c,
            "post",
            "/api/v1/operations",
            {"tool": "t", "category": "c", "quote_id": str(uuid.uuid4())},
        ),
        "quote_invalid",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_error_answer_has_the_one_body(ctx, case):
    request, code = CASES[case]
    response = request(ctx)
    assert response.status_code == int(case.split()[1]), response.content
    body = response.json()
    extra = {"required_scopes"} if code == "insufficient_scope" else set()
    assert set(body) == {"detail", "code", "errors"} | extra, body
    assert body["code"] == code
    assert isinstance(body["detail"], str) and body["detail"]
    assert isinstance(body["errors"], dict)
    assert all(
        isinstance(m, list) and all(isinstance(t, str) for t in m) for m in body["errors"].values()
    )
    if code == "invalid_input":
        assert body["detail"] == "Invalid input" and body["errors"], body


def test_field_errors_name_the_field(ctx):
    body = call(ctx, "post", "/api/v1/operations", {"category": "c", "channel": "fax"}).json()
    assert set(body["errors"]) == {"tool", "channel"}
    assert body["errors"]["tool"] == ["'tool' is a required property"]
    body = call(ctx, "get", "/api/v1/transactions?limit=0&page=2").json()
    assert body["errors"] == {
        "(query)": ["Additional properties are not allowed ('page' was unexpected)"],
        "limit": ["0 is less than the minimum of 1"],
    }


def test_the_scope_error_keeps_its_fields_and_challenge(ctx):
    response = call(ctx, "get", "/api/v1/balances", token="narrow")
    assert response.json() == {
        "detail": "Insufficient scope: this call requires the scope read:balances",
        "code": "insufficient_scope",
        "errors": {},
        "required_scopes": ["read:balances"],
    }
    assert response["WWW-Authenticate"] == (
        'Bearer error="insufficient_scope", scope="read:balances"'
    )


def test_the_openapi_schema_documents_the_error_component_on_every_error_answer(client):
    schema = yaml.safe_load(client.get("/api/schema/").content)
    error = schema["components"]["schemas"]["Error"]
    assert set(error["required"]) == {"detail", "code", "errors"}
    assert error["properties"]["errors"]["additionalProperties"]["type"] == "array"
    seen = 0
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            codes = {c for c in operation["responses"] if c >= "400"}
            assert {"401", "403"} <= codes, (method, path)
            for code in codes:
                content = operation["responses"][code]["content"]["application/json"]
                assert content["schema"] == {"$ref": "#/components/schemas/Error"}, (path, code)
                seen += 1
    assert seen > 40


BIG = "a" * 100_000


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/api/v1/operations", {"tool": BIG, "category": "c"}, "tool"),  # too long
        ("/api/v1/operations", {"tool": "t", "category": "c", BIG: 1}, "(body)"),  # unknown key
        ("/api/v1/operations", {"tool": "t", "category": "c", "channel": BIG}, "channel"),
        ("/api/v1/actions/transfer", {"asset_id": BIG, "amount": "1", "to": "0x"}, "asset_id"),
        ("/api/v1/actions/transfer", {"asset_id": 1, "amount": [BIG], "to": "0x"}, "amount"),
    ],
)
def test_a_field_error_names_the_field_and_the_rule_never_the_whole_value(ctx, path, body, field):
    answer = call(ctx, "post", path, body)
    assert answer.status_code == 400
    errors = answer.json()["errors"]
    assert field in errors, errors
    assert len(answer.content) < 2000  # the 100 KB value is not in it
    assert "a" * 40 not in answer.content.decode()
    for message in errors[field]:
        assert len(message) <= 320
