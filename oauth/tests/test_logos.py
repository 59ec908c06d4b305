"""Agents' logos: fetched by the server from a local web site (oauth/tests/logo_server.py),
re-encoded as our own PNG and served from our origin; everything else refused by name, the
page keeping its monogram. The browser check (the logo loads under the page's CSP) is in
picnic/tests/test_visual_browser.py."""

from __future__ import annotations

import hashlib
import io
import logging

import pytest
from celery import current_app as celery_app
from PIL import Image

from actions.tests.test_enduser_pages import transfer
from oauth import logos
from oauth.models import ClientProfile
from oauth.services import client_logo_fetch, client_logo_shown, client_profile_record
from oauth.tests.logo_server import LogoServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def site(settings):
    settings.AGENT_LOGO_ALLOW_LOOPBACK = True  # the site is on 127.0.0.1
    settings.AGENT_LOGO_TIMEOUT_SECONDS = 1.0
    with LogoServer() as server:
        yield server


@pytest.fixture
def eager(monkeypatch):
    """The task runs in the test (enqueued after commit, as in production)."""
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)


def _profile(client_id: str, logo_uri: str, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        profile = client_profile_record(client_id=client_id, metadata={"logo_uri": logo_uri})
    profile.refresh_from_db()
    return profile, callbacks


def test_a_registered_logo_is_fetched_reencoded_and_served_from_our_origin(
    site, eager, client, public_client, django_capture_on_commit_callbacks
):
    profile, callbacks = _profile(
        public_client.client_id, f"{site.url}/logo.png", django_capture_on_commit_callbacks
    )
    assert len(callbacks) == 1 and site.hits["/logo.png"] == 1  # the task ran after commit
    png = bytes(profile.logo_png)
    assert png != site.png  # our own encoding, never the client's bytes
    with Image.open(io.BytesIO(png)) as image:
        assert (image.format, image.size, image.mode) == ("PNG", (96, 96), "RGBA")
    assert profile.logo_sha256 == hashlib.sha256(png).hexdigest()

    url = client_logo_shown(profile=profile)
    assert url == f"/agents/logo/{profile.logo_sha256}.png"
    served = client.get(url)
    assert served.status_code == 200 and served.content == png
    assert served["Content-Type"] == "image/png"
    assert served["X-Content-Type-Options"] == "nosniff"
    assert served["Cache-Control"] == "public, max-age=31536000, immutable"
    assert client.get(f"/agents/logo/{'0' * 64}.png").status_code == 404
    assert client.get("/agents/logo/short.png").status_code == 404

    # The same URL again: nothing to fetch. A new one: the old logo is dropped at once.
    _profile(public_client.client_id, f"{site.url}/logo.png", django_capture_on_commit_callbacks)
    assert site.hits["/logo.png"] == 1
    profile, _ = _profile(
        public_client.client_id, f"{site.url}/logo.svg", django_capture_on_commit_callbacks
    )
    assert (profile.logo_png, profile.logo_sha256) == (None, "")
    assert client_logo_shown(profile=profile) is None
    assert client.get(url).status_code == 404


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/logo.svg", "content type 'image/svg+xml' is not an allowed image"),
        ("/disguised.png", "not a readable PNG, JPEG, WebP or GIF image"),
        ("/big.png", "bytes, over the 262144-byte limit"),
        ("/endless.png", "over the 262144-byte limit"),
        ("/hang.png", "not fetched within 1s"),
        ("/private.png", "HTTP 302"),
        ("/metadata.png", "HTTP 302"),
        ("/missing.png", "HTTP 404"),
    ],
)
def test_what_is_not_a_small_raster_image_is_refused_by_name(
    site, public_client, caplog, path, reason
):
    profile = ClientProfile.objects.create(
        client_id=public_client.client_id, logo_uri=f"{site.url}{path}"
    )
    with caplog.at_level(logging.WARNING, logger="oauth.services"):
        assert client_logo_fetch(profile_id=profile.pk) is False
    [record] = [r for r in caplog.records if r.name == "oauth.services"]
    assert f"agent logo refused: client {public_client.client_id}" in record.getMessage()
    assert reason in record.getMessage()
    assert site.hits[path] == 1  # asked once; a redirect is never followed
    profile.refresh_from_db()
    assert (profile.logo_png, profile.logo_sha256) == (None, "")
    assert client_logo_shown(profile=profile) is None  # the monogram


def test_in_production_loopback_and_private_addresses_are_never_asked(
    settings, public_client, caplog
):
    settings.AGENT_LOGO_ALLOW_LOOPBACK = False
    with LogoServer() as server:
        port = server.httpd.server_address[1]
        for uri, reason in (
            (f"{server.url}/logo.png", "not an https URL"),  # http: refused outright
            (f"https://127.0.0.1:{port}/logo.png", "non-public address (127.0.0.1)"),
            (f"https://localhost:{port}/logo.png", "non-public address"),
            ("https://10.0.0.1/logo.png", "non-public address (10.0.0.1)"),
            ("https://169.254.169.254/logo.png", "non-public address (169.254.169.254)"),
        ):
            with pytest.raises(
                logos.LogoRefused, match=reason.replace("(", r"\(").replace(")", r"\)")
            ):
                logos.fetch(uri)
        assert sum(server.hits.values()) == 0  # resolved and checked before any connection
    assert not logos.logo_uri_allowed("http://agent.example/logo.png")
    assert not logos.logo_uri_allowed("http://127.0.0.1/logo.png")
    assert logos.logo_uri_allowed("https://agent.example/logo.png")
    settings.AGENT_LOGO_ALLOW_LOOPBACK = True
    assert logos.logo_uri_allowed("http://127.0.0.1/logo.png")
    assert not logos.logo_uri_allowed("http://agent.example/logo.png")


def test_a_page_asks_for_a_logo_once_and_keeps_the_monogram_meanwhile(
    site, client, user, public_client, make_token, django_capture_on_commit_callbacks
):
    ClientProfile.objects.create(client_id=public_client.client_id, logo_uri=f"{site.url}/logo.png")
    make_token(user, public_client)
    client.force_login(user)
    with django_capture_on_commit_callbacks() as asked:
        page = client.get("/agents/").content.decode()
        client.get("/agents/")
    assert 'class="monogram"' in page and '<img class="logo"' not in page
    assert [c.__qualname__ for c in asked] == ["enqueue_on_commit.<locals>.<lambda>"]  # once
    profile = ClientProfile.objects.get(client_id=public_client.client_id)
    assert profile.logo_requested_at is not None
    assert client_logo_fetch(profile_id=profile.pk) is True  # what the task does
    page = client.get("/agents/").content.decode()
    profile.refresh_from_db()
    assert f'<img class="logo" src="/agents/logo/{profile.logo_sha256}.png"' in page


def test_a_logo_never_makes_an_untrusted_name_look_trusted(
    site, client, user, make_application, make_token
):
    impostor = make_application("Picnic Support")
    make_token(user, impostor)
    profile = ClientProfile.objects.create(
        client_id=impostor.client_id, logo_uri=f"{site.url}/logo.png"
    )
    assert client_logo_fetch(profile_id=profile.pk) is True
    profile.refresh_from_db()
    action = transfer(user, impostor)
    client.force_login(user)
    page = client.get(f"/sign/{action.pk}/").content.decode()
    assert f'id="agent-logo" src="/agents/logo/{profile.logo_sha256}.png"' in page
    assert 'id="agent-untrusted"' in page and 'class="tag untrusted"' in page
