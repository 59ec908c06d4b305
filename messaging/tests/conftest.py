from __future__ import annotations

import json

import pytest

from messaging.models import Membership, Provider, Role, SocialAccount, Workspace
from messaging.providers.local_x import LocalXServer

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
def post(client):
    def call(path: str, body, token, **extra):
        return client.post(
            f"/private-messaging-api/actions/{path}",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token.token}",
            **extra,
        )

    return call


@pytest.fixture
def x_server(settings):
    with LocalXServer(token=X_TOKEN) as server:
        settings.X_API_BASE_URL = server.url
        settings.DM_PROVIDER_TIMEOUT_SECONDS = 1.0
        settings.DM_LEASE_SECONDS = 3.0
        yield server
