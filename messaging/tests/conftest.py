"""Messaging's fixtures, over its factories (messaging/tests/factories.py). Other apps' tests
that need a social account or deliveries import these fixtures from here."""

from __future__ import annotations

import uuid

import pytest

from dev.providers.local_x import LocalXServer
from messaging.models import Delivery, Membership, Role, Workspace
from messaging.tests.factories import TOKEN_ENV, X_TOKEN, make_social_account
from messaging.tests.factories import make_delivery as deliver


@pytest.fixture
def workspace(db):
    return Workspace.objects.create(name="Acme growth")


@pytest.fixture
def other_workspace(db):
    return Workspace.objects.create(name="Other company")


@pytest.fixture
def social_account(workspace, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, X_TOKEN)
    return make_social_account(workspace=workspace)


@pytest.fixture
def other_social_account(other_workspace):
    return make_social_account(workspace=other_workspace, handle="other")


@pytest.fixture
def member(user, workspace):
    Membership.objects.create(workspace=workspace, user=user, role=Role.AGENT)
    return user


@pytest.fixture
def dm_token(member, application, make_token):
    return make_token(member, application, scope="agent:dm_read agent:dm_write")


@pytest.fixture
def send_body(workspace, social_account):
    """The body of a send to the private messaging API (a fresh idempotency key)."""
    return {
        "workspace_id": str(workspace.pk),
        "social_account_id": str(social_account.pk),
        "recipient_id": "1234567890",
        "text": "Hi! Your order shipped.",
        "idempotency_key": str(uuid.uuid4()),
    }


@pytest.fixture
def post(api_client):
    """`post("send" | "status", body, token)` to the private messaging API."""

    def call(path: str, body, token, **extra):
        return api_client.post(f"/private-messaging-api/actions/{path}", token, body, **extra)

    return call


@pytest.fixture
def queue(member, application, workspace, social_account):
    """Queue a DM from the member to `recipient`, as the API would (with a transactional test
    its on-commit hook enqueues the delivery task on the broker)."""

    def make(text: str = "Your order shipped", recipient: str = "1234567890") -> Delivery:
        return deliver(
            user=member,
            application=application,
            social_account=social_account,
            text=text,
            recipient_id=recipient,
        )

    return make


@pytest.fixture
def x_server(settings):
    with LocalXServer(token=X_TOKEN) as server:
        settings.X_API_BASE_URL = server.url
        settings.DM_PROVIDER_TIMEOUT_SECONDS = 1.0
        settings.DM_LEASE_SECONDS = 3.0
        yield server


@pytest.fixture
def make_delivery(member, application, social_account):
    """A delivery moved through `steps` by the worker (the back-office tests)."""

    def make(*steps, text="hello", **updates) -> Delivery:
        return deliver(
            *steps,
            user=member,
            application=application,
            social_account=social_account,
            text=text,
            **updates,
        )

    return make
