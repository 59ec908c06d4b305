from __future__ import annotations

import uuid

import pytest

from core.lifecycle import Actor
from messaging.models import Delivery, Membership, Provider, Role, SocialAccount, Workspace
from messaging.providers.local_x import LocalXServer
from messaging.services import delivery_send, delivery_transition

TOKEN_ENV = "PICNIC_TEST_X_TOKEN"
X_TOKEN = "x-user-token-for-tests"


@pytest.fixture
def workspace(db):
    return Workspace.objects.create(name="Acme growth")


@pytest.fixture
def other_workspace(db):
    return Workspace.objects.create(name="Other company")


@pytest.fixture
def social_account(workspace, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, X_TOKEN)
    return SocialAccount.objects.create(
        workspace=workspace, provider=Provider.X, handle="acme", credential_ref=f"env:{TOKEN_ENV}"
    )


@pytest.fixture
def other_social_account(other_workspace):
    return SocialAccount.objects.create(
        workspace=other_workspace,
        provider=Provider.X,
        handle="other",
        credential_ref=f"env:{TOKEN_ENV}",
    )


@pytest.fixture
def member(user, workspace):
    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
    return user


@pytest.fixture
def dm_token(member, application, make_token):
    return make_token(member, application, scope="agent:dm_read agent:dm_write")


@pytest.fixture
def post(api_client):
    """`post("send" | "status", body, token)` to the private messaging API."""

    def call(path: str, body, token, **extra):
        return api_client.post(f"/private-messaging-api/actions/{path}", token, body, **extra)

    return call


@pytest.fixture
def queue(member, application, workspace, social_account):
    """Queue a DM from the member to `recipient`, as the API would."""

    def make(text: str = "Your order shipped", recipient: str = "1234567890") -> Delivery:
        return delivery_send(
            user=member,
            application=application,
            workspace_id=workspace.pk,
            social_account_id=social_account.pk,
            recipient_id=recipient,
            text=text,
            idempotency_key=uuid.uuid4(),
        ).delivery

    return make


@pytest.fixture
def x_server(settings):
    with LocalXServer(token=X_TOKEN) as server:
        settings.X_API_BASE_URL = server.url
        settings.DM_PROVIDER_TIMEOUT_SECONDS = 1.0
        settings.DM_LEASE_SECONDS = 3.0
        yield server


@pytest.fixture
def make_delivery(member, application, workspace, social_account):
    """A delivery moved through `steps` by the worker (the back-office tests)."""

    def make(*steps, text="hello", **updates) -> Delivery:
        delivery = delivery_send(
            user=member,
            application=application,
            workspace_id=workspace.pk,
            social_account_id=social_account.pk,
            recipient_id="55",
            text=text,
            idempotency_key=uuid.uuid4(),
        ).delivery
        for step in steps:
            delivery_transition(
                delivery_id=delivery.pk,
                to=step,
                actor=Actor.worker(),
                updates=updates.pop(step, None),
            )
        return Delivery.objects.get(pk=delivery.pk)

    return make
