"""Deactivated means stopped: whichever way a user is set inactive (the
service, the admin's or a shell's save), their tokens are revoked, a refresh is refused, their
spending keys are destroyed and their grants withdrawn; a token that survived anyway is refused
by the API and the MCP server (401 invalid_token); reactivating brings none of it back."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from oauth2_provider.models import AccessToken, RefreshToken

from actions.execution.models import Action, ActionStatus
from actions.permissions.models import SpendPermissionStatus
from actions.tests.factories import make_offline_wallet, make_permission
from core.lifecycle import Actor
from core.users import user_deactivate
from mcp_adapter.server import DjangoTokenVerifier

pytestmark = pytest.mark.django_db
P = SpendPermissionStatus


def _refresh(code_flow, refresh_token: str):
    return code_flow.client.post(
        "/o/token/",
        {
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": code_flow.application.client_id,
        },
    )


def _call(api_client, token):
    # An action that does not exist: 404 once the token is accepted, 401 when it is refused.
    return api_client.get(f"/api/v1/actions/{uuid.uuid4()}", token)


def _refused(response) -> None:
    assert response.status_code == 401, response.content
    assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]


def test_deactivating_a_user_revokes_their_tokens_and_refresh_is_refused(
    code_flow, api_client, staff_user, django_capture_on_commit_callbacks
):
    issued = code_flow.token(code_flow.approve()["code"]).json()
    assert _call(api_client, issued["access_token"]).status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        assert user_deactivate(user=code_flow.user, actor=Actor.staff(staff_user))
    assert not AccessToken.objects.filter(user=code_flow.user).exists()
    assert not RefreshToken.objects.filter(user=code_flow.user, revoked__isnull=True).exists()
    _refused(_call(api_client, issued["access_token"]))
    refused = _refresh(code_flow, issued["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    assert not AccessToken.objects.filter(user=code_flow.user).exists()

    # Reactivated: nothing comes back; the agent must be authorized again.
    code_flow.user.is_active = True
    code_flow.user.save()
    _refused(_call(api_client, issued["access_token"]))
    assert _refresh(code_flow, issued["refresh_token"]).status_code == 400
    assert not AccessToken.objects.filter(user=code_flow.user).exists()


def test_a_save_that_clears_is_active_deactivates_like_the_service(
    code_flow, api_client, django_capture_on_commit_callbacks
):
    """What the admin's checkbox does: a plain save of the user."""
    issued = code_flow.token(code_flow.approve()["code"]).json()
    user = get_user_model().objects.get(pk=code_flow.user.pk)
    user.is_active = False
    with django_capture_on_commit_callbacks(execute=True):
        user.save()
    assert not AccessToken.objects.filter(user=user).exists()
    _refused(_call(api_client, issued["access_token"]))
    assert _refresh(code_flow, issued["refresh_token"]).status_code == 400


def test_a_token_that_survived_deactivation_is_refused_by_the_api_and_the_mcp_server(
    user, application, make_token, api_client, mcp_resource
):
    """A queryset update sends no signal, so the tokens stay: the token checks refuse them."""
    api_token = make_token(user, application)
    mcp_token = make_token(user, application, resource=[mcp_resource])
    assert DjangoTokenVerifier._verify(mcp_token.token) is not None
    assert _call(api_client, api_token).status_code == 404
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    refused = _call(api_client, api_token)
    _refused(refused)
    assert "deactivated" in refused.headers["WWW-Authenticate"]
    assert DjangoTokenVerifier._verify(mcp_token.token) is None
    # What an open stream re-checks before each event (still_valid, GrantWatch): it ends.
    assert DjangoTokenVerifier._find(mcp_token.token) is None


def test_deactivating_destroys_the_spending_keys_and_withdraws_unsigned_grants(
    user, application, make_application, monkeypatch, django_capture_on_commit_callbacks
):
    wallet = make_offline_wallet(user, monkeypatch)
    mine = make_permission(user=user, application=application, account=wallet, status=P.REQUESTED)
    other = make_application("other-agent")
    theirs = make_permission(user=user, application=other, account=wallet, status=P.REQUESTED)
    with django_capture_on_commit_callbacks(execute=True):
        user_deactivate(user=user, actor=Actor.system())
    for permission in (mine, theirs):
        permission.refresh_from_db()
        assert permission.status == P.DECLINED and permission.session_key_encrypted == ""
        assert permission.key_destroyed_at is not None
        assert "session key destroyed: the user was deactivated" in [
            h.detail for h in permission.history.all()
        ]
        assert Action.objects.get(pk=permission.grant_action_id).status == ActionStatus.REJECTED
    # Deactivating again changes nothing and sends nothing.
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert user_deactivate(user=user, actor=Actor.system()) is False
    assert callbacks == []


def test_unticking_active_in_the_admin_deactivates(
    code_flow, api_client, staff_user, django_capture_on_commit_callbacks
):
    """The admin's change form for the user, as staff submit it with *Active* cleared."""
    issued = code_flow.token(code_flow.approve()["code"]).json()
    staff_client = Client()  # code_flow's client is the user's
    staff_client.force_login(staff_user)
    path = f"/admin/auth/user/{code_flow.user.pk}/change/"
    form = staff_client.get(path).context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if name in ("is_active", "password") or value is None:
            continue
        if isinstance(value, list | tuple):
            data[name] = [getattr(v, "pk", v) for v in value]
        elif hasattr(value, "date"):
            data[f"{name}_0"], data[f"{name}_1"] = f"{value:%Y-%m-%d}", f"{value:%H:%M:%S}"
        else:
            data[name] = value
    with django_capture_on_commit_callbacks(execute=True):
        saved = staff_client.post(path, data)
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    assert get_user_model().objects.get(pk=code_flow.user.pk).is_active is False
    assert not AccessToken.objects.filter(user=code_flow.user).exists()
    _refused(_call(api_client, issued["access_token"]))
