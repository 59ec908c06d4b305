"""Dynamic client registration (RFC 7591/7592): public clients only, loopback or allowlisted
redirect URIs, the known hosted clients' callbacks when the operator lists them, and hostile
bodies refused with a 400 that says why (never a 500, nothing written)."""

from __future__ import annotations

import json

import pytest
from oauth2_provider.models import AccessToken, Application

from oauth.models import ClientProfile

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_limits():
    from django.core.cache import cache

    cache.clear()  # the per-address registration count
    yield
    cache.clear()


REGISTER = "/o/register/"
LOOPBACK = "http://127.0.0.1:53682/callback"
CLAUDE = ["https://claude.ai/api/mcp/auth_callback", "https://claude.com/api/mcp/auth_callback"]
# What Cursor sends: three redirect URIs in one registration.
CURSOR = [
    "cursor://anysphere.cursor-mcp/oauth/callback",
    "https://www.cursor.com/agents/mcp/oauth/callback",
    "http://localhost:8787/callback",
]


def register(client, body, **extra):
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post(REGISTER, raw, content_type="application/json", **extra)


def agent(**fields) -> dict:
    return {
        "client_name": "Test agent",
        "redirect_uris": [LOOPBACK],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **fields,
    }


@pytest.fixture
def allow(settings):
    """Let the operator's allowlist (OAUTH2_DCR_REDIRECT_URIS) hold `uris`, with their
    private-use schemes allowed as redirect schemes, as settings.py derives them."""

    def set_(uris: list[str]):
        settings.OAUTH2_DCR_REDIRECT_URIS = uris
        schemes = list(settings.OAUTH2_PROVIDER["ALLOWED_REDIRECT_URI_SCHEMES"])
        for uri in uris:
            scheme = uri.partition(":")[0]
            if scheme not in schemes:
                schemes.append(scheme)
        settings.OAUTH2_PROVIDER = {
            **settings.OAUTH2_PROVIDER,
            "ALLOWED_REDIRECT_URI_SCHEMES": schemes,
        }

    return set_


def test_it_registers_a_public_loopback_client(client):
    answer = register(
        client,
        agent(client_uri="https://agent.example/", logo_uri="https://agent.example/logo.png"),
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    application = Application.objects.get(client_id=body["client_id"])
    assert application.client_type == Application.CLIENT_PUBLIC
    assert application.authorization_grant_type == Application.GRANT_AUTHORIZATION_CODE
    assert application.registration_source == Application.RegistrationSource.DCR
    assert application.redirect_uris == LOOPBACK
    assert application.name == "Test agent"
    assert application.user is None  # nobody signed in: an open registration
    assert body["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in body
    assert body["grant_types"] == ["authorization_code", "refresh_token"]
    assert body["client_uri"] == "https://agent.example/"
    assert body["logo_uri"] == "https://agent.example/logo.png"
    profile = ClientProfile.objects.get(client_id=body["client_id"])
    assert (profile.client_uri, profile.logo_uri) == (
        "https://agent.example/",
        "https://agent.example/logo.png",
    )


def test_an_absent_auth_method_registers_a_public_client(client):
    body = agent()
    del body["token_endpoint_auth_method"]
    answer = register(client, body)
    assert answer.status_code == 201
    assert answer.json()["token_endpoint_auth_method"] == "none"
    assert Application.objects.get().client_type == Application.CLIENT_PUBLIC


@pytest.mark.parametrize(
    "uri", ["http://localhost:8080/cb", "http://[::1]:9000/cb", "http://127.0.0.1/cb?x=1"]
)
def test_every_loopback_form_is_accepted(client, uri):
    assert register(client, agent(redirect_uris=[uri])).status_code == 201


def test_a_redirect_uri_outside_the_allowlist_is_refused(client):
    answer = register(client, agent(redirect_uris=[LOOPBACK, "https://evil.example/cb"]))
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_redirect_uri"
    assert "https://evil.example/cb" in answer.json()["error_description"]
    assert "OAUTH2_DCR_REDIRECT_URIS" in answer.json()["error_description"]
    assert not Application.objects.exists()


def test_claudes_callbacks_register_once_the_operator_lists_them(client, allow):
    assert register(client, agent(redirect_uris=CLAUDE)).status_code == 400
    allow(CLAUDE)
    answer = register(client, agent(client_name="Claude", redirect_uris=CLAUDE))
    assert answer.status_code == 201, answer.content
    assert answer.json()["redirect_uris"] == CLAUDE


def test_cursor_registers_its_three_redirect_uris_in_one_request(client, allow):
    refused = register(client, agent(client_name="Cursor", redirect_uris=CURSOR))
    assert refused.status_code == 400  # the hosted and private-use callbacks are not listed
    assert not Application.objects.exists()
    allow(CURSOR[:2])
    answer = register(client, agent(client_name="Cursor", redirect_uris=CURSOR))
    assert answer.status_code == 201, answer.content
    assert Application.objects.get().redirect_uris.split() == CURSOR


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"token_endpoint_auth_method": "client_secret_basic"}, "Only public clients"),
        ({"token_endpoint_auth_method": "private_key_jwt"}, "Only public clients"),
        ({"grant_types": ["client_credentials"]}, "grant_types"),
        ({"grant_types": ["authorization_code", "implicit"]}, "grant_types"),
        ({"grant_types": ["refresh_token"]}, "grant_types"),
        ({"grant_types": "authorization_code"}, "grant_types"),
        ({"response_types": ["token"]}, "response_types"),
        ({"response_types": []}, "response_types"),
        ({"client_name": {"en": "x"}}, "client_name"),
        ({"client_name": "a\x00b"}, "client_name"),
        ({"client_name": "x" * 101}, "client_name"),
        ({"logo_uri": "http://agent.example/logo.png"}, "logo_uri"),
        ({"logo_uri": "javascript:alert(1)"}, "logo_uri"),
        ({"client_uri": ["https://a.example"]}, "client_uri"),
        ({"redirect_uris": []}, "redirect_uris"),
        ({"redirect_uris": "http://127.0.0.1/cb"}, "redirect_uris"),
        ({"redirect_uris": [LOOPBACK] * 11}, "redirect_uris"),
        ({"redirect_uris": [None]}, "string"),
        ({"redirect_uris": [42]}, "string"),
        ({"redirect_uris": ["http://127.0.0.1/c\x00b"]}, "control characters"),
        ({"redirect_uris": ["http://127.0.0.1/c b"]}, "spaces"),
        ({"redirect_uris": ["http://[::1/cb"]}, "not a valid URI"),
        ({"redirect_uris": ["http://127.0.0.1:99999/cb"]}, "not a valid URI"),
        ({"redirect_uris": ["http://127.0.0.1/cb#x"]}, "fragment"),
        ({"redirect_uris": ["http://user:pw@127.0.0.1/cb"]}, "user information"),
        ({"redirect_uris": ["javascript:alert(1)//127.0.0.1"]}, "not allowed"),
        ({"redirect_uris": ["http://127.0.0.1.evil.example/cb"]}, "not allowed"),
        ({"redirect_uris": ["http://evil.example/cb"]}, "not allowed"),
        ({"redirect_uris": ["x" * 3000]}, "characters"),
    ],
)
def test_hostile_metadata_is_refused_with_a_reason(client, fields, words):
    answer = register(client, agent(**fields))
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["error"] in {"invalid_client_metadata", "invalid_redirect_uri"}
    assert words in body["error_description"]
    assert not Application.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[]",
        b'"a string"',
        b"null",
        b"\xff\xfe\x00",
        b'{"redirect_uris": ["http://127.0.0.1/cb"],',
        b"[" * 100_000,
        b'{"a": ' * 5000 + b"1" + b"}" * 5000,
        json.dumps({"redirect_uris": [LOOPBACK], "junk": "x" * 20_000}).encode(),
    ],
    ids=["empty", "text", "array", "string", "null", "binary", "cut", "deep", "deep-object", "big"],
)
def test_hostile_bodies_get_a_400_never_a_500(client, raw):
    answer = register(client, raw)
    assert answer.status_code == 400, answer.content[:200]
    assert answer.json()["error"] == "invalid_client_metadata"
    assert not Application.objects.exists()


def test_a_form_body_or_a_lying_content_length_is_refused(client):
    form = client.post(REGISTER, {"redirect_uris": LOOPBACK})
    assert form.status_code == 400
    lying = client.generic(
        "POST", REGISTER, b"{}", content_type="application/json", CONTENT_LENGTH="99999999"
    )
    assert lying.status_code == 400
    assert not Application.objects.exists()


def test_rfc_7592_management_keeps_the_same_rules(client):
    registered = register(client, agent()).json()
    url = f"{REGISTER}{registered['client_id']}/"
    auth = {"HTTP_AUTHORIZATION": f"Bearer {registered['registration_access_token']}"}
    assert client.get(url, **auth).json()["client_id"] == registered["client_id"]
    evil = client.put(
        url,
        json.dumps(agent(redirect_uris=["https://evil.example/cb"])),
        "application/json",
        **auth,
    )
    assert evil.status_code == 400
    application = Application.objects.get(client_id=registered["client_id"])
    assert application.redirect_uris == LOOPBACK
    moved = client.put(
        url,
        json.dumps(agent(redirect_uris=["http://127.0.0.1:7000/cb"])),
        "application/json",
        **auth,
    )
    assert moved.status_code == 200, moved.content
    application.refresh_from_db()
    assert application.redirect_uris == "http://127.0.0.1:7000/cb"
    assert client.get(url).status_code == 401  # no registration token
    auth = {"HTTP_AUTHORIZATION": f"Bearer {moved.json()['registration_access_token']}"}
    assert client.delete(url, **auth).status_code == 204
    assert not Application.objects.filter(client_id=registered["client_id"]).exists()


def test_the_registration_token_opens_nothing_else(client, api_client):
    registered = register(client, agent()).json()
    token = registered["registration_access_token"]
    assert AccessToken.objects.filter(application__client_id=registered["client_id"]).count() == 1
    assert api_client.get("/api/v1/profile", token).status_code in (401, 403)


def test_one_address_registers_at_most_the_hourly_limit(client, settings):
    settings.OAUTH2_DCR_PER_HOUR = 2
    assert register(client, agent()).status_code == 201
    assert register(client, agent()).status_code == 201
    refused = register(client, agent())
    assert refused.status_code == 429
    assert refused["Retry-After"] == "3600"
    assert refused.json()["error"] == "too_many_requests"
    assert Application.objects.count() == 2
    assert register(client, agent(), REMOTE_ADDR="10.9.8.7").status_code == 201


def test_a_registered_private_use_callback_receives_the_code(client, allow, user):
    allow(CURSOR[:2])
    registered = register(client, agent(client_name="Cursor", redirect_uris=CURSOR)).json()
    client.force_login(user)
    params = {
        "client_id": registered["client_id"],
        "response_type": "code",
        "redirect_uri": CURSOR[0],
        "scope": "read:actions",
        "state": "s",
        "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        "code_challenge_method": "S256",
    }
    page = client.get("/o/authorize/", params)
    assert page.status_code == 200
    assert page["Content-Security-Policy"].endswith("form-action 'self' cursor:")
    answer = client.post("/o/authorize/", {**params, "allow": "Authorize"})
    assert answer.status_code == 302
    assert answer["Location"].startswith(f"{CURSOR[0]}?code=")


@pytest.mark.parametrize(
    "uri",
    [
        "https://evil.example/" + "a" * 15_000,  # under the 16 KiB body limit
        "http://127.0.0.1/#" + "a" * 15_000,
        "ftp://" + "a" * 15_000,
    ],
)
def test_a_refused_redirect_uri_is_named_by_a_short_prefix_only(client, uri):
    answer = register(client, agent(redirect_uris=[uri]))
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_redirect_uri"
    assert len(answer.content) < 1000
    assert "a" * 40 not in answer.content.decode()


def test_a_token_request_for_a_huge_resource_does_not_echo_it(client):
    answer = client.post(
        "/o/token/",
        {
            "grant_type": "authorization_code",
            "code": "nope",
            "client_id": "nope",
            "redirect_uri": LOOPBACK,
            "resource": "https://elsewhere.example/" + "a" * 100_000,
        },
    )
    assert 400 <= answer.status_code < 500
    assert len(answer.content) < 1000
