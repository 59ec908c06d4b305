"""Client ID Metadata Documents through DOT's SSRF-hardened fetcher, against a real local HTTPS
server: loopback is refused unless OAUTH2_CIMD_ALLOW_LOOPBACK says otherwise (tests only), the
document is cached, a bad one is backed off, and the profile keeps its logo and home page."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from oauth2_provider.models import Application

from oauth.models import ClientProfile
from oauth.tests.conftest import CALLBACK
from oauth.tests.tls import DocumentServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def documents(tmp_path, monkeypatch):
    cache.clear()  # DOT keeps its failure backoff in the cache
    with DocumentServer(tmp_path) as server:
        monkeypatch.setenv("SSL_CERT_FILE", str(server.ca))  # the fetcher trusts our CA
        server.document = {
            "client_id": server.client_id,
            "client_name": "Document agent",
            "client_uri": f"{server.origin}/",
            "logo_uri": f"{server.origin}/logo.png",
            "redirect_uris": [CALLBACK],
            "token_endpoint_auth_method": "none",
        }
        yield server
    cache.clear()


def _authorize(client, user, client_id):
    client.force_login(user)
    return client.get(
        "/o/authorize/",
        {
            "client_id": client_id,
            "response_type": "code",
            "redirect_uri": CALLBACK,
            "scope": "read:actions",
            "code_challenge": "x" * 43,
            "code_challenge_method": "S256",
        },
    )


def test_loopback_documents_are_refused_by_default(client, user, documents, settings):
    assert settings.OAUTH2_CIMD_ALLOW_LOOPBACK is False
    page = _authorize(client, user, documents.client_id)
    assert page.status_code == 400
    assert documents.fetches == 0  # refused before any connection
    assert not Application.objects.exists()


def test_a_document_is_fetched_once_and_shown_on_the_consent_page(
    client, user, documents, settings
):
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    page = _authorize(client, user, documents.client_id)
    assert page.status_code == 200, page.content[:300]
    html = page.content.decode()
    assert "Document agent wants to use your Picnic account" in html
    assert "Described by a document published on localhost." in html
    assert 'id="unverified"' not in html
    # Its callback is on loopback: any local program could claim the document's name.
    assert 'id="loopback-warning"' in html
    assert "could say it is localhost's agent" in html
    assert f"{documents.origin}/logo.png" not in html  # fetched by us, later (test_logos.py)
    application = Application.objects.get(client_id=documents.client_id)
    assert application.registration_source == Application.RegistrationSource.CIMD
    assert application.client_type == Application.CLIENT_PUBLIC
    profile = ClientProfile.objects.get(client_id=documents.client_id)
    assert profile.logo_uri == f"{documents.origin}/logo.png"
    assert _authorize(client, user, documents.client_id).status_code == 200
    assert documents.fetches == 1  # cached (DOT: Cache-Control, within its floor and ceiling)


def test_a_document_naming_another_client_is_refused_and_backed_off(
    client, user, documents, settings
):
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    documents.document["client_id"] = "https://elsewhere.example/client.json"
    assert _authorize(client, user, documents.client_id).status_code == 400
    assert not Application.objects.exists()
    assert not ClientProfile.objects.exists()
    documents.document["client_id"] = documents.client_id
    assert _authorize(client, user, documents.client_id).status_code == 400  # backoff
    assert documents.fetches == 1


def test_a_document_with_a_secret_or_a_client_id_with_dots_is_refused(
    client, user, documents, settings
):
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    documents.document["client_secret"] = "shh"
    assert _authorize(client, user, documents.client_id).status_code == 400
    dotted = f"{documents.origin}/a/../client.json"
    assert _authorize(client, user, dotted).status_code == 400
    assert not Application.objects.exists()


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://evil.example/cb",  # http off loopback
        "https://evil.example/cb",  # https on another host than the document's
        "http://127.0.0.1:9999/callback#frag",  # a fragment
        "javascript:alert(1)",
    ],
)
def test_a_document_whose_redirect_uris_break_the_policy_is_refused_and_nothing_is_kept(
    client, user, documents, settings, redirect_uri
):
    """The policy dynamic registration applies (oauth.policy.redirect_uri_problem), before the
    consent page and before any profile row."""
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    documents.document["redirect_uris"] = [redirect_uri]
    client.force_login(user)
    page = client.get(
        "/o/authorize/",
        {
            "client_id": documents.client_id,
            "response_type": "code",
            "redirect_uri": redirect_uri,
            "scope": "read:actions",
            "code_challenge": "x" * 43,
            "code_challenge_method": "S256",
        },
    )
    assert page.status_code == 400
    assert "wants to use your Picnic account" not in page.content.decode()
    assert not Application.objects.exists()
    assert not ClientProfile.objects.exists()


def test_a_document_that_dot_refuses_after_the_fetch_leaves_no_profile(
    client, user, documents, settings
):
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    documents.document["grant_types"] = ["client_credentials"]  # DOT: no redirect-based grant
    assert _authorize(client, user, documents.client_id).status_code == 400
    assert not Application.objects.exists()
    assert not ClientProfile.objects.exists()


def test_an_https_redirect_on_the_documents_host_is_allowed_and_matched_exactly(
    client, user, documents, settings
):
    settings.OAUTH2_CIMD_ALLOW_LOOPBACK = True
    on_host = f"{documents.origin}/callback"
    documents.document["redirect_uris"] = [on_host]
    client.force_login(user)
    params = {
        "client_id": documents.client_id,
        "response_type": "code",
        "scope": "read:actions",
        "code_challenge": "x" * 43,
        "code_challenge_method": "S256",
    }
    assert client.get("/o/authorize/", {**params, "redirect_uri": on_host}).status_code == 200
    for near in (on_host + "/", on_host + "?x=1", on_host.replace("/callback", "/callbacK")):
        assert client.get("/o/authorize/", {**params, "redirect_uri": near}).status_code == 400
