"""One metadata document, one issuer, and exactly what is accepted: the code flow with PKCE S256
and its refresh, public clients, dynamic registration and metadata documents, `iss`."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_metadata_advertises_what_agents_use(client):
    metadata = client.get("/.well-known/oauth-authorization-server").json()
    assert metadata["issuer"] == "http://testserver"
    assert metadata["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert metadata["response_types_supported"] == ["code"]
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["registration_endpoint"] == "http://testserver/o/register/"
    assert metadata["client_id_metadata_document_supported"] is True
    assert metadata["authorization_response_iss_parameter_supported"] is True
    assert "none" in metadata["token_endpoint_auth_methods_supported"]
    assert metadata["revocation_endpoint"] == "http://testserver/o/revoke_token/"
    assert "device_authorization_endpoint" not in metadata
    assert "introspection_endpoint" not in metadata


def test_the_web_app_describes_only_itself_as_a_protected_resource(client):
    # The MCP server publishes its own document (mcp_adapter/http.py, tested there); the web
    # app must not answer for `<its origin>/mcp` or any other path with different scopes.
    assert client.get("/.well-known/oauth-protected-resource").json()["resource"] == (
        "http://testserver"
    )
    for path in ("mcp", "api/v1", "anything"):
        assert client.get(f"/.well-known/oauth-protected-resource/{path}").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/o/device-authorization/",
        "/o/device/",
        "/o/applications/",
        "/o/applications/register/",
        "/o/authorized_tokens/",
        "/o/introspect/",
        "/o/.well-known/oauth-authorization-server",
    ],
)
def test_routes_agents_do_not_use_are_gone(client, user, path):
    client.force_login(user)
    assert client.get(path).status_code == 404


def test_a_client_credentials_grant_is_refused(client, user):
    from oauth2_provider.models import AccessToken, Application

    app = Application.objects.create(
        name="machine",
        user=user,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_CLIENT_CREDENTIALS,
        client_secret="s3cret-for-tests",
    )
    answer = client.post(
        "/o/token/",
        {
            "grant_type": "client_credentials",
            "client_id": app.client_id,
            "client_secret": "s3cret-for-tests",
            "scope": "read:profile",
        },
    )
    assert answer.status_code in (400, 401)
    assert answer.json()["error"] in {"unauthorized_client", "unsupported_grant_type"}
    assert not AccessToken.objects.exists()


def test_the_openapi_document_names_the_code_flow_and_its_refresh(client, user, make_token):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    flows = schema["components"]["securitySchemes"]["oauth2"]["flows"]
    assert list(flows) == ["authorizationCode"]
    assert flows["authorizationCode"]["refreshUrl"] == "/o/token/"
