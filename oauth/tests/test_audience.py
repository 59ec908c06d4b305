"""RFC 8707 audiences: a client may name only the MCP server; a token asked for without
`resource` is bound to the API (this origin), never unbound. The MCP server accepts only tokens
bound to it; the API accepts those (it serves that resource) and tokens bound to itself; an
unbound token and a token for any other resource are refused by both. A token from the real
flow, with `resource`, calls the API."""

from __future__ import annotations

import uuid

import pytest
import requests
from oauth2_provider.models import AccessToken

from mcp_adapter.server import DjangoTokenVerifier

pytestmark = pytest.mark.django_db
OTHER = "https://other.example/mcp"


def _status(api_client, token) -> int:
    # An id that does not exist: 404 once the token is accepted, 401 when it is refused.
    return api_client.get(f"/api/v1/actions/{uuid.uuid4()}", token).status_code


def test_the_code_flow_binds_the_token_to_the_mcp_server_and_the_api_accepts_it(
    code_flow, api_client, mcp_resource
):
    answer = code_flow.approve(resource=mcp_resource)
    assert answer["iss"] == "http://testserver"  # RFC 9207, the metadata's issuer
    issued = code_flow.token(answer["code"], resource=mcp_resource)
    assert issued.status_code == 200, issued.content
    body = issued.json()
    stored = AccessToken.objects.get(user=code_flow.user)
    assert stored.resource == [mcp_resource]
    assert _status(api_client, body["access_token"]) == 404
    verified = DjangoTokenVerifier._verify(body["access_token"])
    assert verified is not None and verified.resource == mcp_resource
    assert verified.scopes == ["read:actions"]


def test_a_token_request_may_omit_the_resource_and_inherits_the_grants(code_flow, mcp_resource):
    answer = code_flow.approve(resource=mcp_resource)
    assert code_flow.token(answer["code"]).status_code == 200
    assert AccessToken.objects.get(user=code_flow.user).resource == [mcp_resource]


def test_authorizing_another_resource_is_refused_back_to_the_client(code_flow, mcp_resource):
    page = code_flow.consent_page(resource=OTHER)
    assert page.status_code == 302
    location = page["Location"]
    assert location.startswith("http://127.0.0.1:9999/callback?")
    assert "error=invalid_target" in location and "state=st4te" in location
    assert "iss=http%3A%2F%2Ftestserver" in location  # RFC 9207 on errors too
    assert not AccessToken.objects.exists()


def test_a_consent_form_edited_to_another_resource_grants_nothing(code_flow, mcp_resource):
    code_flow.client.force_login(code_flow.user)
    answer = code_flow.client.post(
        "/o/authorize/", {**code_flow.params(resource=OTHER), "allow": "Authorize"}
    )
    assert answer.status_code == 404
    from oauth2_provider.models import Grant

    assert not Grant.objects.exists()


def test_a_token_request_for_another_resource_is_refused(code_flow, mcp_resource):
    answer = code_flow.approve(resource=mcp_resource)
    refused = code_flow.token(answer["code"], resource=OTHER)
    assert refused.status_code == 400, refused.content
    assert refused.json()["error"] == "invalid_target"
    assert not AccessToken.objects.exists()


def test_a_token_asked_for_without_resource_is_bound_to_the_api_alone(
    code_flow, api_client, settings
):
    """Nothing asked at authorization nor at the token endpoint: the API's audience (the web
    origin), which the API accepts and the MCP server refuses."""
    answer = code_flow.approve()
    issued = code_flow.token(answer["code"])
    assert issued.status_code == 200, issued.content
    stored = AccessToken.objects.get(user=code_flow.user)
    assert stored.resource == [settings.PUBLIC_BASE_URL.rstrip("/").lower()]
    token = issued.json()["access_token"]
    assert _status(api_client, token) == 404
    assert DjangoTokenVerifier._verify(token) is None
    # Its refresh keeps the binding.
    refreshed = code_flow.client.post(
        "/o/token/",
        {
            "grant_type": "refresh_token",
            "refresh_token": issued.json()["refresh_token"],
            "client_id": code_flow.application.client_id,
        },
    )
    assert refreshed.status_code == 200, refreshed.content
    again = AccessToken.objects.filter(user=code_flow.user).order_by("-pk").first()
    assert again.pk != stored.pk
    assert again.resource == stored.resource


def test_the_api_accepts_mcp_bound_and_api_bound_tokens_only(
    api_client, user, application, make_token, mcp_resource, settings
):
    unbound = make_token(user, application, resource=[])
    mcp_bound = make_token(user, application, resource=[mcp_resource])
    api_bound = make_token(user, application, resource=["http://testserver/api/"])
    origin_bound = make_token(user, application, resource=[settings.PUBLIC_BASE_URL])
    elsewhere = make_token(user, application, resource=[OTHER])
    neighbour = make_token(user, application, resource=[mcp_resource + "-admin"])
    refused = api_client.get(f"/api/v1/actions/{uuid.uuid4()}", unbound)
    assert refused.status_code == 401
    assert "bound to no resource" in refused.headers.get("WWW-Authenticate", "") + str(
        refused.content
    )
    assert _status(api_client, mcp_bound) == 404
    assert _status(api_client, api_bound) == 404
    assert _status(api_client, origin_bound) == 404
    assert _status(api_client, elsewhere) == 401
    assert _status(api_client, neighbour) == 401


def test_the_mcp_verifier_accepts_only_tokens_bound_to_it(
    user, application, make_token, mcp_resource
):
    bound = make_token(user, application, resource=[mcp_resource])
    shouting = make_token(
        user, application, resource=[mcp_resource.upper().replace("/MCP", "/mcp")]
    )
    assert DjangoTokenVerifier._verify(bound.token) is not None
    assert DjangoTokenVerifier._verify(shouting.token) is not None  # scheme and host fold
    for resource in ([], [OTHER], ["http://testserver/api/"], [mcp_resource + "/x"]):
        token = make_token(user, application, resource=resource)
        assert DjangoTokenVerifier._verify(token.token) is None, resource
    expired = make_token(user, application, resource=[mcp_resource], expires_in=-10)
    assert DjangoTokenVerifier._verify(expired.token) is None


@pytest.mark.django_db(transaction=True)
def test_the_mcp_http_server_refuses_a_token_for_another_resource(
    mcp_http, user, application, make_token
):
    from mcp_adapter.tests.test_transports import HEADERS, INIT

    def post(token):
        headers = {**HEADERS, "Authorization": f"Bearer {token.token}"}
        return requests.post(mcp_http.url, json=INIT, headers=headers, timeout=5)

    assert post(make_token(user, application, resource=[mcp_http.url])).status_code == 200
    for resource in ([OTHER], []):
        refused = post(make_token(user, application, resource=resource))
        assert refused.status_code == 401
        assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]
