"""The consent page (who asks, in plain words, with a warning for a self-registered agent) and
"Connected agents" (each grant with its scopes and last use; Disconnect kills its tokens)."""

from __future__ import annotations

import pytest
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from mcp_adapter.server import DjangoTokenVerifier
from oauth.models import AgentUse, ClientProfile
from oauth.services import agent_revoke

pytestmark = pytest.mark.django_db


def test_the_consent_page_says_who_asks_and_what_it_may_do(code_flow, public_client):
    ClientProfile.objects.create(
        client_id=public_client.client_id,
        client_uri="https://agent.example/",
        logo_uri="https://cdn.agent.example/logo.png",
    )
    page = code_flow.consent_page(scope="read:balances write:actions")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Registered agent wants to use your Picnic account" in html
    assert 'id="unverified"' in html  # it registered itself
    assert "https://agent.example/" in html
    assert 'src="https://cdn.agent.example/logo.png"' in html
    assert "The token balances of your smart accounts" in html
    assert "sign it with your passkey" in html
    assert "<strong>127.0.0.1</strong>" in html and "a program running on this computer" in html
    # The answer redirects to the agent's callback and the logo loads from its origin: this
    # page's CSP allows exactly those two beyond the site's own.
    csp = page["Content-Security-Policy"]
    assert csp.endswith("form-action 'self' http://127.0.0.1:9999")
    assert "img-src 'self' data: https://cdn.agent.example;" in csp


def test_a_client_staff_registered_shows_no_warning(code_flow, public_client):
    Application.objects.filter(pk=public_client.pk).update(
        registration_source=Application.RegistrationSource.MANUAL
    )
    html = code_flow.consent_page().content.decode()
    assert 'id="unverified"' not in html
    assert "img-src 'self' data:;" in code_flow.consent_page()["Content-Security-Policy"]


def test_deny_sends_the_agent_away_with_nothing(code_flow):
    code_flow.client.force_login(code_flow.user)
    answer = code_flow.client.post("/o/authorize/", code_flow.params())  # no "allow"
    assert answer.status_code == 302
    assert "error=access_denied" in answer["Location"]
    assert "iss=http%3A%2F%2Ftestserver" in answer["Location"]  # RFC 9207 on errors too
    assert not Grant.objects.exists()


def test_an_unknown_client_gets_an_error_page_not_a_redirect(code_flow):
    page = code_flow.consent_page(client_id="nobody")
    assert page.status_code == 400
    assert "This request cannot be approved" in page.content.decode()


def test_the_consent_page_asks_a_signed_out_user_to_sign_in(client, code_flow):
    answer = client.get("/o/authorize/", code_flow.params())
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/?next=")


def _connect(code_flow, scope="read:actions", resource=None) -> dict:
    extra = {"resource": resource} if resource else {}
    answer = code_flow.approve(scope=scope, **extra)
    issued = code_flow.token(answer["code"])
    assert issued.status_code == 200, issued.content
    return issued.json()


def test_connected_agents_lists_each_grant_with_its_scopes_and_last_use(
    code_flow, client, user, mcp_resource
):
    tokens = _connect(code_flow, scope="read:actions read:balances", resource=mcp_resource)
    client.force_login(user)
    page = client.get("/agents/").content.decode()
    assert "Registered agent" in page
    assert "The token balances of your smart accounts" in page
    assert "Not yet" in page  # it has not called the MCP server
    assert DjangoTokenVerifier._verify(tokens["access_token"]) is not None  # an MCP request
    assert AgentUse.objects.filter(user=user, application=code_flow.application).exists()
    client.force_login(user)
    assert "Not yet" not in client.get("/agents/").content.decode()


def test_disconnect_kills_every_token_of_that_agent_only(
    code_flow, client, user, other_user, make_application, make_token, api_client
):
    tokens = _connect(code_flow)
    other_app = make_application("another agent")
    kept = make_token(user, other_app)
    theirs = make_token(other_user, code_flow.application)
    client.force_login(user)
    answer = client.post(f"/agents/{code_flow.application.pk}/revoke")
    assert answer.status_code == 302 and answer["Location"] == "/agents/"
    assert not AccessToken.objects.filter(user=user, application=code_flow.application).exists()
    assert not RefreshToken.objects.filter(
        user=user, application=code_flow.application, revoked__isnull=True
    ).exists()
    assert api_client.get("/api/v1/profile", tokens["access_token"]).status_code == 401
    refreshed = client.post(
        "/o/token/",
        {
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": code_flow.application.client_id,
        },
    )
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"
    # Another agent of the same user, and another user of the same agent, keep theirs.
    assert AccessToken.objects.filter(pk__in=[kept.pk, theirs.pk]).count() == 2


def test_disconnect_answers_post_only_and_only_for_the_signed_in_user(client, user, code_flow):
    _connect(code_flow)
    assert client.post(f"/agents/{code_flow.application.pk}/revoke").status_code == 302
    assert AccessToken.objects.filter(user=user).exists()  # not signed in: nothing happened
    client.force_login(user)
    assert client.get(f"/agents/{code_flow.application.pk}/revoke").status_code == 405
    assert client.post("/agents/999999/revoke").status_code == 302  # nothing to disconnect


def test_agent_revoke_counts_what_it_revoked(code_flow, user):
    _connect(code_flow)
    revoked = agent_revoke(user=user, application_id=code_flow.application.pk)
    assert (revoked.access_tokens, revoked.refresh_tokens) == (1, 1)
    again = agent_revoke(user=user, application_id=code_flow.application.pk)
    assert (again.access_tokens, again.refresh_tokens) == (0, 0)
