"""A client_credentials token has no user. Every API endpoint acts for a
user, so such a token gets one 403 in the error body, before anything is looked up: no 500,
and no difference between an id that exists and one that does not. The token endpoint no
longer issues them (oauth/tests/test_metadata.py); these tests keep the API safe from one made
another way (the admin, an older grant)."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.django_db

ALL_SCOPES = (
    "read:actions write:actions read:accounts read:balances read:card read:profile "
    "read:transactions operations:read operations:write agent:dm_read agent:dm_write"
)
EXPECTED = {
    "detail": (
        "This API acts for a user: the bearer token was issued to an application alone "
        "(client_credentials); authorize as a user to get one"
    ),
    "code": "user_token_required",
    "errors": {},
}


@pytest.fixture
def app_token(application, make_token):
    return make_token(None, application, scope=ALL_SCOPES)


def _existing_action_id(user, application) -> str:
    from datetime import timedelta

    from django.utils import timezone

    from actions.execution.models import Action

    action = Action.objects.create(
        user=user,
        application=application,
        type="transfer",
        summary="Send 1 USDC",
        chain_id=31337,
        smart_account="0x" + "ab" * 20,
        expires_at=timezone.now() + timedelta(minutes=10),
    )
    return str(action.pk)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("get", "/api/v1/profile", None),
        ("get", "/api/v1/smart-accounts", None),
        ("get", "/api/v1/balances", None),
        ("get", "/api/v1/transactions", None),
        ("get", f"/api/v1/operations/{uuid.uuid4()}", None),
        (
            "post",
            "/api/v1/quotes",
            {"tool": "t", "submit_field": "f", "submit_value": "v"},
        ),
        ("post", "/api/v1/operations", {"tool": "t", "category": "c", "input": "x"}),
        ("post", "/api/v1/actions/card_freeze", {}),
        ("post", "/private-messaging-api/actions/status", {}),
    ],
)
def test_a_user_less_token_is_refused_cleanly_everywhere(api_client, app_token, method, path, body):
    response = getattr(api_client, method)(path, app_token, body)
    assert response.status_code == 403, response.content
    assert response.json() == EXPECTED


def test_which_action_ids_exist_cannot_be_told_apart(api_client, app_token, user, application):
    existing = _existing_action_id(user, application)
    for action_id in (existing, str(uuid.uuid4()), "not-an-id"):
        response = api_client.get(f"/api/v1/actions/{action_id}", app_token)
        assert response.status_code == 403, response.content
        assert response.json() == EXPECTED


def test_a_user_token_still_works(api_client, user, application, make_token):
    token = make_token(user, application, scope="read:profile")
    assert api_client.get("/api/v1/profile", token).status_code == 200
