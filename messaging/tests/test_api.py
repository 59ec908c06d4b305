"""Send, status and cancel over DRF; every status response validated against the seed schema."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.db import close_old_connections, connection
from jsonschema import Draft7Validator, FormatChecker

from core.lifecycle import Actor
from core.users import user_deactivate
from messaging import contract
from messaging.models import D, Delivery, Membership, Role
from messaging.services import delivery_send, delivery_transition

VALIDATOR = Draft7Validator(contract.STATUS_OUTPUT_SCHEMA, format_checker=FormatChecker())


def valid(body: dict) -> dict:
    errors = [e.message for e in VALIDATOR.iter_errors(body)]
    assert errors == [], errors
    return body


def said(body: dict) -> list[str]:
    """Each field error of an error body as `field: message`."""
    return [f"{field}: {m}" for field, messages in body["errors"].items() for m in messages]


def ids(body) -> dict:
    return {k: body[k] for k in ("workspace_id", "social_account_id")}


def test_a_send_is_accepted_queued(post, dm_token, send_body):
    response = post("send", send_body, dm_token)
    assert response.status_code == 202
    body = valid(response.json())
    assert body["contract_version"] == "private-messaging/v1"
    assert body["action"]["status"] == "queued"
    assert body["action"]["provider_message_id"] is None and body["action"]["reason"] is None
    delivery = Delivery.objects.get(pk=body["action"]["id"])
    assert str(delivery.conversation_id) == body["action"]["conversation_id"]
    assert list(delivery.history.values_list("status", "actor_kind")) == [("queued", "agent")]


def test_the_same_key_and_payload_returns_the_same_action(post, dm_token, send_body):
    first = post("send", send_body, dm_token).json()
    again = post("send", send_body, dm_token)
    assert again.status_code == 200
    assert valid(again.json()) == first
    by_conversation = {**send_body, "conversation_id": first["action"]["conversation_id"]}
    del by_conversation["recipient_id"]
    assert post("send", by_conversation, dm_token).json()["action"]["id"] == first["action"]["id"]
    assert Delivery.objects.count() == 1


def test_the_same_key_with_another_payload_is_a_conflict_and_changes_nothing(
    post, dm_token, send_body
):
    first = post("send", send_body, dm_token).json()
    response = post("send", {**send_body, "text": "Something else"}, dm_token)
    assert response.status_code == 409
    assert "already used with a different payload" in response.json()["detail"]
    assert first["action"]["id"] in response.json()["detail"]
    assert list(Delivery.objects.values_list("text", flat=True)) == ["Hi! Your order shipped."]


def test_keys_are_scoped_to_workspace_and_social_account(
    post, dm_token, send_body, user, workspace, social_account
):
    from messaging.models import Provider, SocialAccount

    second = SocialAccount.objects.create(
        workspace=workspace, provider=Provider.X, handle="acme_support", credential_ref="env:X"
    )
    a = post("send", send_body, dm_token).json()["action"]["id"]
    b = post("send", {**send_body, "social_account_id": str(second.pk)}, dm_token).json()["action"][
        "id"
    ]
    assert a != b


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"unexpected": 1}, "Additional properties are not allowed"),
        ({"idempotency_key": "not-a-uuid"}, "is not a 'uuid'"),
        ({"text": ""}, "text"),
        ({"recipient_id": None}, "recipient_id"),
        ({"conversation_id": str(uuid.uuid4())}, "exactly one of conversation_id or recipient_id"),
    ],
)
def test_bad_send_input_is_rejected_with_a_clear_error(post, dm_token, send_body, change, message):
    response = post("send", {**send_body, **change}, dm_token)
    assert response.status_code == 400
    assert any(message in e for e in said(response.json())), response.json()
    assert Delivery.objects.count() == 0


def test_a_viewer_cannot_send(post, dm_token, send_body, member, workspace):
    Membership.objects.filter(user=member).update(role=Role.VIEWER)
    response = post("send", send_body, dm_token)
    assert response.status_code == 403
    assert response.json()["detail"] == "Your role in this workspace (viewer) does not allow this"


def test_status_by_action_id_and_by_idempotency_key(post, dm_token, send_body):
    sent = post("send", send_body, dm_token).json()
    by_id = post("status", {**ids(send_body), "action_id": sent["action"]["id"]}, dm_token)
    by_key = post(
        "status", {**ids(send_body), "idempotency_key": send_body["idempotency_key"]}, dm_token
    )
    assert by_id.status_code == by_key.status_code == 200
    assert valid(by_id.json()) == valid(by_key.json()) == sent


@pytest.mark.parametrize("status", [s for s in contract.STATUSES])
def test_every_status_validates_against_the_seed_schema(post, dm_token, send_body, status):
    sent = post("send", send_body, dm_token).json()["action"]
    path = {
        "queued": [],
        "claimed": [D.CLAIMED],
        "sending": [D.CLAIMED, D.SENDING],
        "sent": [D.CLAIMED, D.SENDING, D.SENT],
        "unknown": [D.CLAIMED, D.SENDING, D.UNKNOWN],
        "failed": [D.CLAIMED, D.SENDING, D.FAILED],
        "cancelled": [D.CANCELLED],
    }[status]
    for step in path:
        updates = (
            {"provider_message_id": "1799"}
            if step == D.SENT
            else {"reason": "x"}
            if step in (D.FAILED, D.UNKNOWN)
            else None
        )
        delivery_transition(delivery_id=sent["id"], to=step, actor=Actor.system(), updates=updates)
    body = valid(post("status", {**ids(send_body), "action_id": sent["id"]}, dm_token).json())
    assert body["action"]["status"] == status


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"unexpected": True}, "Additional properties are not allowed"),
        ({"action_id": "123"}, "is not a 'uuid'"),
        ({"workspace_id": None}, "workspace_id"),
    ],
)
def test_bad_status_input_is_rejected(post, dm_token, send_body, change, message):
    body = {**ids(send_body), "action_id": str(uuid.uuid4()), **change}
    response = post("status", body, dm_token)
    assert response.status_code == 400
    assert any(message in e for e in said(response.json())), response.json()


def test_status_needs_an_action_id_or_an_idempotency_key(post, dm_token, send_body):
    response = post("status", ids(send_body), dm_token)
    assert response.status_code == 400
    assert said(response.json()) == ["(body): one of action_id or idempotency_key is required"]


def test_an_unknown_key_says_so_clearly(post, dm_token, send_body):
    key = uuid.uuid4()
    response = post("status", {**ids(send_body), "idempotency_key": str(key)}, dm_token)
    assert response.status_code == 404
    detail = response.json()["detail"]
    assert detail.startswith(f"Delivery not found: no action with idempotency_key {key}")
    assert "nothing was sent" in detail


def test_another_workspace_learns_nothing(
    post,
    dm_token,
    send_body,
    other_workspace,
    other_social_account,
    make_user,
    application,
    make_token,
):
    sent = post("send", send_body, dm_token).json()["action"]
    outsider = make_user("mallory")
    Membership.objects.create(workspace=other_workspace, user=outsider, role=Role.OWNER)
    token = make_token(outsider, application, scope="agent:dm_read agent:dm_write")
    own_account = {
        "workspace_id": str(other_workspace.pk),
        "social_account_id": str(other_social_account.pk),
    }
    # Their own workspace and account, our action id: the same answer as a random id.
    probe = post("status", {**own_account, "action_id": sent["id"]}, token)
    missing = post("status", {**own_account, "action_id": str(uuid.uuid4())}, token)
    assert probe.status_code == missing.status_code == 404
    assert probe.json()["detail"].replace(sent["id"], "X") == missing.json()["detail"].replace(
        missing.json()["detail"].split("action_id ")[1].split(" ")[0], "X"
    )
    # Our workspace ids: the same answer as a workspace that does not exist.
    ours = post("status", {**ids(send_body), "action_id": sent["id"]}, token)
    nowhere = post(
        "status",
        {
            "workspace_id": str(uuid.uuid4()),
            "social_account_id": send_body["social_account_id"],
            "action_id": sent["id"],
        },
        token,
    )
    assert ours.status_code == nowhere.status_code == 404
    assert (
        ours.json()
        == nowhere.json()
        == {
            "detail": "Social account not found in this workspace",
            "code": "not_found",
            "errors": {},
        }
    )
    # Nor can they send through our account.
    assert (
        post("send", send_body | {"idempotency_key": str(uuid.uuid4())}, token).status_code == 404
    )


def test_a_social_account_of_another_workspace_is_not_found(
    post, dm_token, send_body, other_social_account
):
    body = {**send_body, "social_account_id": str(other_social_account.pk)}
    assert post("send", body, dm_token).status_code == 404


def test_scopes_are_enforced(post, member, application, make_token, send_body):
    read_only = make_token(member, application, scope="agent:dm_read")
    response = post("send", send_body, read_only)
    assert response.status_code == 403
    assert response.json()["required_scopes"] == ["agent:dm_write"]
    write_only = make_token(member, application, scope="agent:dm_write")
    status = post("status", {**ids(send_body), "action_id": str(uuid.uuid4())}, write_only)
    assert status.status_code == 403


def test_the_sender_cancels_a_queued_delivery(post, dm_token, send_body):
    sent = post("send", send_body, dm_token).json()["action"]
    response = post("cancel", {**ids(send_body), "action_id": sent["id"]}, dm_token)
    assert response.status_code == 200
    assert valid(response.json())["action"]["status"] == "cancelled"
    row = Delivery.objects.get(pk=sent["id"]).history.last()
    assert (row.status, row.actor_kind, row.detail) == ("cancelled", "user", "cancelled by alice")


def test_a_delivery_already_sending_cannot_be_cancelled(post, dm_token, send_body):
    sent = post("send", send_body, dm_token).json()["action"]
    for step in (D.CLAIMED, D.SENDING):
        delivery_transition(delivery_id=sent["id"], to=step, actor=Actor.worker())
    response = post("cancel", {**ids(send_body), "action_id": sent["id"]}, dm_token)
    assert response.status_code == 409
    assert (
        response.json()["detail"]
        == "Only queued or claimed deliveries can be cancelled; this one is sending"
    )


def test_another_agent_cannot_cancel_but_an_admin_can(
    post, dm_token, send_body, workspace, make_user, application, make_token
):
    sent = post("send", send_body, dm_token).json()["action"]
    agent = make_user("carol")
    Membership.objects.create(workspace=workspace, user=agent, role=Role.AGENT)
    response = post(
        "cancel",
        {**ids(send_body), "action_id": sent["id"]},
        make_token(agent, application, scope="agent:dm_write"),
    )
    assert response.status_code == 403
    admin = make_user("dave")
    Membership.objects.create(workspace=workspace, user=admin, role=Role.ADMIN)
    response = post(
        "cancel",
        {**ids(send_body), "action_id": sent["id"]},
        make_token(admin, application, scope="agent:dm_write"),
    )
    assert response.status_code == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicate_sends_create_exactly_one_action(
    member, application, workspace, social_account
):
    key = uuid.uuid4()
    barrier = threading.Barrier(4)
    results = []

    def send() -> None:
        try:
            barrier.wait(timeout=10)
            result = delivery_send(
                user=member,
                application=application,
                workspace_id=workspace.pk,
                social_account_id=social_account.pk,
                recipient_id="42",
                text="hello",
                idempotency_key=key,
            )
            results.append((result.delivery.pk, result.created))
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(results) == 4
    assert len({pk for pk, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]
    assert Delivery.objects.count() == 1
    assert Delivery.objects.get().history.count() == 1


@pytest.mark.parametrize("how", ["service", "queryset update"])
def test_a_deactivated_users_agent_queues_no_dm(
    post, dm_token, send_body, member, how, django_capture_on_commit_callbacks
):
    """Deactivated means stopped: with the service the token is gone; with an update that
    sends no signal the token survives, and the token check refuses it all the same."""
    if how == "service":
        with django_capture_on_commit_callbacks(execute=True):
            user_deactivate(user=member, actor=Actor.system())
    else:
        get_user_model().objects.filter(pk=member.pk).update(is_active=False)
    response = post("send", send_body, dm_token)
    assert response.status_code == 401, response.content
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
    assert not Delivery.objects.exists()
