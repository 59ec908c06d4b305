"""DM sends against careless or hostile input: refused whole, in the one error body,
with nothing written, and a send that fails midway leaves no conversation behind."""

from __future__ import annotations

import uuid

import pytest

from messaging import services
from messaging.models import Conversation, Delivery

pytestmark = pytest.mark.django_db


def _body(workspace, social_account, **changes):
    return {
        "workspace_id": str(workspace.pk),
        "social_account_id": str(social_account.pk),
        "recipient_id": "4244",
        "text": "hello",
        "idempotency_key": str(uuid.uuid4()),
        **changes,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("recipient_id", "4244\n"),  # `$` matches before a final newline in Python
        ("recipient_id", "٤٢٤٤"),
        ("recipient_id", "1" * 20),
        ("text", "hi\x00there"),
        ("text", "\ud800"),
    ],
)
def test_a_bad_send_is_refused_naming_the_field_and_writes_nothing(
    post, dm_token, workspace, social_account, field, value
):
    response = post("send", _body(workspace, social_account, **{field: value}), dm_token)
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_input" and body["detail"] == "Invalid input"
    assert list(body["errors"]) == [field]
    assert Conversation.objects.count() == 0
    assert Delivery.objects.count() == 0


def test_a_send_that_fails_after_the_conversation_leaves_no_conversation(
    member, application, workspace, social_account, monkeypatch
):
    def broken_create(**kwargs):
        raise RuntimeError("the delivery could not be written")

    monkeypatch.setattr(services, "create", broken_create)
    with pytest.raises(RuntimeError):
        services.delivery_send(
            user=member,
            application=application,
            workspace_id=workspace.pk,
            social_account_id=social_account.pk,
            recipient_id="4244",
            text="hello",
            idempotency_key=uuid.uuid4(),
        )
    assert Conversation.objects.count() == 0
    assert Delivery.objects.count() == 0
