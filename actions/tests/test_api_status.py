"""GET /api/v1/actions/{id}: get_action_status over DRF with OAuth2 bearer tokens."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import yaml
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.tests.factories import make_action, make_offline_wallet, make_permission
from core.lifecycle import Actor, transition

SEED_FIELDS = [
    "action_id",
    "type",
    "status",
    "summary",
    "chain_id",
    "smart_account",
    "tx_hash",
    "user_op_hash",
    "block_number",
    "error",
    "created_at",
    "expires_at",
    "signed_at",
    "broadcast_at",
    "executed_at",
    "status_history",
]
# Beyond the seed, after its fields: which spending permission signed it (null: the passkey),
# and what happened (docs/decisions/0006-action-outcome.md).
FIELDS = [
    *SEED_FIELDS,
    "signed_by_permission",
    "signed_by_permission_id",
    "outcome",
    "outcome_detail",
]


def url(action_id) -> str:
    return f"/api/v1/actions/{action_id}"


@pytest.fixture
def action(user, application):
    return make_action(user=user, application=application)


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application, scope="read:actions")


def test_it_returns_exactly_the_seed_fields(api_client, action, token):
    response = api_client.get(url(action.pk), token)
    assert response.status_code == 200
    body = response.json()
    assert list(body) == FIELDS
    assert body["signed_by_permission"] is None and body["signed_by_permission_id"] is None
    assert body["action_id"] == str(action.pk)
    assert body["type"] == "transfer"
    assert body["status"] == "proposed"
    assert body["chain_id"] == 31337 and isinstance(body["chain_id"], int)
    assert body["user_op_hash"] == action.user_op_hash
    assert body["user_op_hash"].startswith("0x") and len(body["user_op_hash"]) == 66
    for field in ("tx_hash", "block_number", "error", "signed_at", "broadcast_at", "executed_at"):
        assert body[field] is None
    created = body["created_at"]
    assert created.endswith("Z") and "T" in created
    assert body["status_history"] == [
        {"status": "proposed", "timestamp": created, "detail": "proposed by the action tool"}
    ]


def test_card_actions_have_no_user_op_hash(api_client, user, application, token):
    card = make_action(
        user=user, application=application, type="cardFreeze", user_op=None, summary="Freeze card"
    )
    body = api_client.get(url(card.pk), token).json()
    assert body["type"] == "cardFreeze"
    assert body["user_op_hash"] is None


def test_it_reports_every_transition_with_detail(api_client, action, token):
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.REJECTED,
        actor=Actor.end_user(action.user),
        detail="user declined on the signing page",
    )
    body = api_client.get(url(action.pk), token).json()
    assert body["status"] == "rejected"
    assert [(h["status"], h["detail"]) for h in body["status_history"]] == [
        ("proposed", "proposed by the action tool"),
        ("rejected", "user declined on the signing page"),
    ]


def test_it_expires_an_overdue_action_on_read(api_client, user, application, token):
    action = make_action(user=user, application=application, ttl_seconds=60)
    Action.objects.filter(pk=action.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    body = api_client.get(url(action.pk), token).json()
    assert body["status"] == "expired"
    assert body["status_history"][-1]["status"] == "expired"
    assert Action.objects.get(pk=action.pk).status == ActionStatus.EXPIRED


def test_unknown_action_is_not_found_with_the_seed_text(api_client, token):
    missing = uuid.uuid4()
    response = api_client.get(url(missing), token)
    assert response.status_code == 404
    assert response.json() == {
        "detail": f"Action not found: {missing}",
        "code": "not_found",
        "errors": {},
    }


def test_a_malformed_id_is_not_found(api_client, token):
    response = api_client.get(url("not-a-uuid"), token)
    assert response.status_code == 404
    assert response.json() == {
        "detail": "Action not found: not-a-uuid",
        "code": "not_found",
        "errors": {},
    }


def test_actions_beyond_the_24_hour_window_are_not_found(api_client, action, token):
    Action.objects.filter(pk=action.pk).update(
        created_at=timezone.now() - timedelta(hours=24, seconds=1)
    )
    response = api_client.get(url(action.pk), token)
    assert response.status_code == 404
    assert response.json()["detail"] == f"Action not found: {action.pk}"


def test_another_users_action_is_refused(api_client, action, other_user, application, make_token):
    response = api_client.get(url(action.pk), make_token(other_user, application))
    assert response.status_code == 403
    assert response.json() == {
        "detail": "Action does not belong to the authenticated user",
        "code": "permission_denied",
        "errors": {},
    }


def test_another_oauth_clients_action_is_refused(
    api_client, action, user, make_application, make_token
):
    other_client = make_application("another-agent")
    response = api_client.get(url(action.pk), make_token(user, other_client))
    assert response.status_code == 403
    assert response.json() == {
        "detail": "Action belongs to a different OAuth client",
        "code": "permission_denied",
        "errors": {},
    }


def test_a_token_without_read_actions_gets_a_scope_error(
    api_client, action, user, application, make_token
):
    response = api_client.get(url(action.pk), make_token(user, application, scope="write:actions"))
    assert response.status_code == 403
    body = response.json()
    assert body["detail"] == "Insufficient scope: this call requires the scope read:actions"
    assert body["required_scopes"] == ["read:actions"]
    assert 'error="insufficient_scope"' in response["WWW-Authenticate"]


def test_no_token_is_401_with_a_bearer_challenge(client, action):
    response = client.get(url(action.pk))
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("case", ["garbage", "expired"])
def test_an_invalid_or_expired_token_is_401(
    api_client, action, user, application, make_token, case
):
    if case == "expired":
        token = make_token(user, application, expires_in=-10).token
    else:
        token = "not-a-token"
    response = api_client.get(url(action.pk), token)
    assert response.status_code == 401


def test_the_openapi_schema_describes_the_response_exactly(client):
    response = client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    operation = schema["paths"]["/api/v1/actions/{action_id}"]["get"]
    assert operation["operationId"] == "get_action_status"
    assert set(operation["responses"]) == {"200", "401", "403", "404"}
    component = schema["components"]["schemas"]["ActionStatus"]
    assert list(component["properties"]) == FIELDS
    assert set(component["required"]) == set(FIELDS)
    nullable = {name for name, prop in component["properties"].items() if prop.get("nullable")}
    assert nullable == {
        "signed_by_permission",
        "signed_by_permission_id",
        "outcome_detail",
        "tx_hash",
        "user_op_hash",
        "block_number",
        "error",
        "signed_at",
        "broadcast_at",
        "executed_at",
    }
    enums = schema["components"]["schemas"]
    # The seed's five, as the seed spells and orders them, then the two kinds a spending
    # permission's grant and revocation are (user operations the user signs like the others).
    assert enums["ActionTypeEnum"]["enum"] == [
        "transfer",
        "swap",
        "cardFreeze",
        "cardUnfreeze",
        "cardLimitSet",
        "spendGrant",
        "spendRevoke",
    ]
    assert enums["ActionStatusEnum"]["enum"] == [
        "proposed",
        "signed",
        "submitted",
        "broadcast",
        "executed",
        "failed",
        "expired",
        "rejected",
    ]
    history = enums["StatusHistoryEntry"]
    assert list(history["properties"]) == ["status", "timestamp", "detail"]
    assert history["properties"]["detail"]["nullable"] is True
    assert operation["security"] == [{"oauth2": ["read:actions"]}]


def _executed_with_an_audit_row(action):
    from actions.execution.models import ACTION_LIFECYCLE
    from core.lifecycle import record_history

    for step in (ActionStatus.SIGNED, ActionStatus.SUBMITTED, ActionStatus.BROADCAST):
        transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.worker(), detail=None
        )
    executed = transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.EXECUTED,
        actor=Actor.worker(),
        updates={"tx_hash": "0x" + "cd" * 32, "block_number": 7},
        detail="included in block 7",
    )
    # A staff audit row that moved nothing: not part of status_history.
    record_history(
        lifecycle=ACTION_LIFECYCLE,
        instance=executed,
        from_status=ActionStatus.EXECUTED,
        status=ActionStatus.EXECUTED,
        actor=Actor.system(),
        detail="re-sent",
    )
    return executed


@pytest.mark.postgres  # the token and the action share a statement there (core.token_reads)
def test_it_reads_the_token_and_the_action_with_its_history_in_one_query(
    api_client, action, token, django_assert_num_queries
):
    _executed_with_an_audit_row(action)
    with django_assert_num_queries(1):  # the bearer token with the action and its history
        response = api_client.get(url(action.pk), token)
    assert response.status_code == 200
    assert [row["status"] for row in response.json()["status_history"]] == [
        "proposed",
        "signed",
        "submitted",
        "broadcast",
        "executed",
    ]


@pytest.mark.parametrize("state", ["proposed", "executed", "failed", "by permission"])
def test_the_one_query_answer_is_byte_for_byte_the_serialized_model(
    api_client, action, token, state, monkeypatch
):
    from rest_framework.renderers import JSONRenderer

    from actions.execution.selectors import action_with_history
    from actions.serializers import ActionStatusSerializer

    if state == "executed":
        _executed_with_an_audit_row(action)
    elif state == "by permission":
        _signed_by(_permission(action.user, action.application, monkeypatch), action)
    elif state == "failed":
        transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=ActionStatus.SIGNED, actor=Actor.system()
        )
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.FAILED,
            actor=Actor.system(),
            updates={"error": "AA23 reverted: «nope»"},
            detail="",
        )
    response = api_client.get(url(action.pk), token)
    expected = ActionStatusSerializer(action_with_history(action_id=action.pk)).data
    assert response.content == JSONRenderer().render(expected)


def _permission(user, application, monkeypatch):
    return make_permission(
        user=user,
        application=application,
        account=make_offline_wallet(user, monkeypatch),
        name="coffee",
    )


def _signed_by(permission, action):
    """What transfer_under_permission leaves: the action signed, linked to its permission."""
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.SIGNED,
        actor=Actor.system(),
        updates={"spend_permission": permission},
        detail=f"signed by permission {permission.name} for agent",
    )


@pytest.mark.postgres  # the token and the action share a statement there (core.token_reads)
def test_it_names_the_permission_that_signed_it_and_only_that(
    api_client, action, token, user, application, monkeypatch, django_assert_num_queries
):
    permission = _permission(user, application, monkeypatch)
    _signed_by(permission, action)
    with django_assert_num_queries(1):  # the token with the action and its permission's name
        body = api_client.get(url(action.pk), token).json()
    assert body["signed_by_permission"] == "coffee"
    assert body["signed_by_permission_id"] == str(permission.pk)
    # The permission's id is the one get_spend_permissions lists it under.
    listed = api_client.get("/api/v1/spend-permissions", token).json()["permissions"]
    assert [p["permission_id"] for p in listed] == [body["signed_by_permission_id"]]
    # Its grant is linked to it too, but the user signed that one with the passkey.
    grant = api_client.get(url(permission.grant_action_id), token).json()
    assert grant["type"] == "spendGrant"
    assert grant["signed_by_permission"] is None and grant["signed_by_permission_id"] is None


def test_a_revoked_token_is_refused_on_the_very_next_status_read(
    api_client, action, token, user, application
):
    from oauth.services import agent_revoke

    assert api_client.get(url(action.pk), token).status_code == 200
    agent_revoke(user=user, application_id=application.pk)
    response = api_client.get(url(action.pk), token)
    assert response.status_code == 401
    assert response.json()["detail"].startswith("The access token is not valid: it was revoked")
    assert not type(token).objects.filter(pk=token.pk).exists()


@pytest.mark.postgres  # the token and the action share a statement there (core.token_reads)
def test_one_statement_decides_each_answer_as_before(
    api_client, action, token, other_user, application, django_assert_num_queries
):
    """Not found, another user's, an unknown token: one statement each, the same answers."""
    with django_assert_num_queries(1):
        missing = api_client.get(url(uuid.uuid4()), token)
    assert missing.status_code == 404
    other = make_action(user=other_user, application=application)
    with django_assert_num_queries(1):
        theirs = api_client.get(url(other.pk), token)
    assert theirs.status_code == 403
    assert theirs.json()["detail"] == "Action does not belong to the authenticated user"
    refused = api_client.get(url(action.pk), "not-a-token")
    assert refused.status_code == 401
