"""Hostile input on the authorization and token endpoints: a 4xx (an error page, an error
redirect or an OAuth error body), never a 500, and nothing issued."""

from __future__ import annotations

import pytest
from oauth2_provider.models import AccessToken, Grant

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "extra",
    [
        {"client_id": "a\x00b"},
        {"client_id": "x" * 5000},
        {"client_id": "https://a\x00.example/client.json"},
        {"client_id": "https://[::1/client.json"},
        {"redirect_uri": "http://127.0.0.1:9999/callback\x00"},
        {"redirect_uri": "http://[::1"},
        {"resource": "a\x00b"},
        {"resource": "http://[::1"},
        {"resource": "https://other.example/mcp"},
        {"scope": "read:actions \x00"},
        {"scope": "nope"},
        {"code_challenge_method": "plain"},
        {"code_challenge": ""},
        {"code_challenge": "short"},
        {"response_type": "token"},
    ],
)
def test_a_hostile_authorization_request_is_a_clean_refusal(code_flow, extra):
    page = code_flow.consent_page(**extra)
    assert page.status_code in (302, 400), page.status_code
    if page.status_code == 302:
        assert "error=" in page["Location"]
    code_flow.client.force_login(code_flow.user)
    posted = code_flow.client.post("/o/authorize/", {**code_flow.params(**extra), "allow": "1"})
    assert posted.status_code in (302, 400, 404), posted.status_code
    if posted.status_code == 302:
        assert "error=" in posted["Location"]
    assert not Grant.objects.exists()


def test_a_consent_form_with_fields_missing_is_an_error_page(code_flow):
    code_flow.client.force_login(code_flow.user)
    params = code_flow.params()
    del params["redirect_uri"]
    answer = code_flow.client.post("/o/authorize/", {**params, "allow": "1"})
    assert answer.status_code == 400
    assert "start again from the agent" in answer.content.decode()


def test_a_long_state_is_carried_back_not_refused(code_flow):
    assert code_flow.consent_page(state="s" * 5000).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"grant_type": "authorization_code", "code": "a\x00b"},
        {"grant_type": "authorization_code", "code": "x" * 5000},
        {"grant_type": "refresh_token", "refresh_token": "a\x00b"},
        {"grant_type": "authorization_code", "code": "c", "client_id": "a\x00b"},
        {"grant_type": "authorization_code", "code": "c", "resource": "http://[::1"},
        {"grant_type": "password", "username": "alice", "password": "pw-alice"},
        {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": "x"},
        {"grant_type": "\x00"},
    ],
)
def test_a_hostile_token_request_is_an_oauth_error(client, public_client, body):
    answer = client.post("/o/token/", {"client_id": public_client.client_id, **body})
    assert 400 <= answer.status_code < 500, answer.content[:200]
    assert "error" in answer.json()
    assert not AccessToken.objects.exists()


def test_a_nul_in_basic_credentials_or_a_revocation_is_refused(client, public_client):
    import base64

    basic = base64.b64encode(b"a\x00b:secret").decode()
    answer = client.post(
        "/o/token/",
        {"grant_type": "refresh_token", "refresh_token": "x"},
        HTTP_AUTHORIZATION=f"Basic {basic}",
    )
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_request"
    revoked = client.post(
        "/o/revoke_token/", {"token": "a\x00b", "client_id": public_client.client_id}
    )
    assert revoked.status_code == 400
