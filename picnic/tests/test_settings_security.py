"""Safe settings: DEBUG off unless asked, secrets masked in every
error report, HTTPS settings from the deployment, OAuth per RFC 9700, login throttling."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography.fernet import Fernet
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory
from django.views.debug import ExceptionReporter

from core.debug import mask_url_secrets

ROOT = Path(__file__).resolve().parents[2]

# The production environment the README documents (plus throwaway values for the secrets).
PRODUCTION = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": "x" * 10 + secrets.token_urlsafe(50),
    "SPEND_PERMISSION_KEYS": Fernet.generate_key().decode(),
    "DJANGO_ALLOWED_HOSTS": "picnic.example",
    "PUBLIC_BASE_URL": "https://picnic.example",
    "WEBAUTHN_ORIGIN": "https://picnic.example",
    "WEBAUTHN_RP_ID": "picnic.example",
    "DJANGO_BEHIND_TLS_PROXY": "true",
    "TRUSTED_PROXY_IPS": "10.0.0.0/8",
    "DJANGO_HSTS_PRELOAD": "true",
    "OAUTH2_REDIRECT_URI_SCHEMES": "https",
    "CACHE_URL": "redis://:cache-pw@127.0.0.1:6379/11",
    "EVENTS_URL": "redis://:events-pw@127.0.0.1:6379/12",
}


def _python(code: str, **overrides: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in overrides}
    environ.update(overrides, DJANGO_SETTINGS_MODULE="picnic.settings")
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _settings(names: list[str], **overrides: str) -> dict:
    code = (
        "import json; from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n, None) for n in {names!r}}}))"
    )
    result = _python(code, **overrides)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


# --- item 2: DEBUG --------------------------------------------------------------------------


def test_debug_is_off_unless_asked(tmp_path):
    unset = _settings(["DEBUG", "SECRET_KEY"], DJANGO_DEBUG="", PICNIC_VAR_DIR=str(tmp_path))
    assert unset["DEBUG"] is False
    # Not the public dev key: a random one kept under var/, the same for every process.
    assert "dev-only" not in unset["SECRET_KEY"] and len(unset["SECRET_KEY"]) >= 50
    again = _settings(["SECRET_KEY"], DJANGO_DEBUG="", PICNIC_VAR_DIR=str(tmp_path))
    assert again["SECRET_KEY"] == unset["SECRET_KEY"]
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0
    assert _settings(["DEBUG"], DJANGO_DEBUG="true")["DEBUG"] is True


def test_allowed_hosts_are_loopback_by_default_and_never_a_wildcard_without_debug():
    assert _settings(["ALLOWED_HOSTS"], DJANGO_ALLOWED_HOSTS="")["ALLOWED_HOSTS"] == [
        "127.0.0.1",
        "localhost",
    ]
    result = _python("print('started')", DJANGO_ALLOWED_HOSTS="*", DJANGO_DEBUG="")
    assert result.returncode != 0
    assert "DJANGO_ALLOWED_HOSTS" in result.stderr.splitlines()[-1]


def test_make_run_turns_debug_on_and_run_local_refuses_without_it(settings):
    makefile = (ROOT / "Makefile").read_text()
    assert "DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(BIN)/python manage.py run_local" in makefile
    settings.DEBUG = False
    with pytest.raises(CommandError, match="run it with DJANGO_DEBUG=true"):
        call_command("run_local")


@pytest.mark.django_db
def test_a_404_without_debug_is_plain(client, settings):
    settings.DEBUG = False
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    body = response.content.decode()
    assert "URLconf" not in body
    assert "api/v1/" not in body and "staff/" not in body


# --- item 2: secrets masked in error reports ------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "masked"),
    [
        (
            "postgres://picnic:hunter2@db.internal:5432/picnic",
            "postgres://picnic:********@db.internal:5432/picnic",
        ),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:********@127.0.0.1:6379/0"),
        ("amqp://u:p@ss@mq:5672//", "amqp://u:********@mq:5672//"),
        (
            "https://sentry.example/api?dsn_key=abc123&x=1",
            "https://sentry.example/api?dsn_key=********&x=1",
        ),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        ("sqlite:////srv/picnic/var/picnic.sqlite3", "sqlite:////srv/picnic/var/picnic.sqlite3"),
    ],
)
def test_url_passwords_are_masked(raw, masked):
    assert mask_url_secrets(raw) == masked


@pytest.mark.parametrize("debug", [True, False])
def test_error_reports_mask_url_passwords_whatever_debug_is(settings, debug):
    # Made at run time: the report also shows this test's source lines.
    secret = {n: f"{secrets.token_hex(6)}{n}" for n in range(1, 10)}
    settings.DEBUG = debug
    settings.DATABASE_URL = f"postgres://picnic:{secret[1]}@db.internal:5432/picnic"
    settings.CELERY_BROKER_URL = f"redis://:{secret[2]}@redis.internal:6379/0"
    settings.EVENTS_URL = f"rediss://events:{secret[3]}@redis.internal:6380/1"
    settings.CACHE_URL = f"redis://:{secret[4]}@redis.internal:6379/2"
    settings.SENTRY_DSN = f"https://{secret[5]}@sentry.example/1"
    request = RequestFactory().post(
        "/x", {"password": secret[6]}, HTTP_X_UPSTREAM=f"redis://:{secret[7]}@r:1/0"
    )
    request.sensitive_post_parameters = ["password"]
    try:
        broker = f"amqp://worker:{secret[8]}@mq.internal:5672//"  # noqa: F841 - a frame local
        api_token = secret[9]  # noqa: F841 - a frame local named like a secret
        raise RuntimeError("the broker is down")
    except RuntimeError:
        reporter = ExceptionReporter(request, *sys.exc_info())
        html, text = reporter.get_traceback_html(), reporter.get_traceback_text()
    for report in (html, text):
        for n, value in secret.items():
            assert value not in report, n
    # Still useful: which server, which user.
    assert "picnic:********@db.internal:5432/picnic" in html
    assert "worker:********@mq.internal" in html


# --- item 8: HTTPS when the deployment says so -----------------------------------------------

HTTPS_SETTINGS = [
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "SECURE_PROXY_SSL_HEADER",
]


def test_https_settings_follow_the_public_url():
    local = _settings(HTTPS_SETTINGS, PUBLIC_BASE_URL="", WEBAUTHN_ORIGIN="")
    assert local == {
        "SECURE_SSL_REDIRECT": False,
        "SESSION_COOKIE_SECURE": False,
        "CSRF_COOKIE_SECURE": False,
        "SECURE_HSTS_SECONDS": 0,
        "SECURE_PROXY_SSL_HEADER": None,
    }
    production = _settings(HTTPS_SETTINGS, **PRODUCTION)
    assert production == {
        "SECURE_SSL_REDIRECT": True,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],
    }


def test_check_deploy_with_the_documented_production_environment_is_clean():
    environ = {k: v for k, v in os.environ.items() if k not in PRODUCTION}
    environ.update(PRODUCTION)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout


def test_production_installs_no_dev_app_and_loads_no_dev_module():
    # What every production process loads: the apps, the URLs (every view), the Celery app.
    code = (
        "import json, sys; from django.conf import settings; from django.urls import get_resolver; "
        "get_resolver().url_patterns; import picnic.asgi, picnic.celery; "
        "print(json.dumps([[m for m in sys.modules if m.split('.')[0] in ('dev', 'chain')], "
        "'dev' in settings.INSTALLED_APPS]))"
    )
    result = _python(code, **PRODUCTION, PICNIC_DEV_APPS="")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [[], False]
    # make prod's runner command asks for it; the embedded setup and the tests have it.
    assert _settings(["DEV_APPS"], **PRODUCTION, PICNIC_DEV_APPS="1") == {"DEV_APPS": True}
    assert _settings(["DEV_APPS"], DJANGO_DEBUG="true") == {"DEV_APPS": True}
    assert "dev" in django_settings.INSTALLED_APPS


def test_bad_redirect_uri_schemes_fail_start_up():
    result = _python("print('started')", OAUTH2_REDIRECT_URI_SCHEMES="ftp")
    assert result.returncode != 0
    assert "OAUTH2_REDIRECT_URI_SCHEMES" in result.stderr.splitlines()[-1]


# --- item 8: OAuth --------------------------------------------------------------------------


def test_a_token_in_the_query_string_is_refused(client, api_client, user, application, make_token):
    token = make_token(user, application, scope="read:actions")
    path = f"/api/v1/actions/{uuid.uuid4()}"
    assert api_client.get(path, token).status_code == 404  # the header works: not found
    response = client.get(path, {"access_token": token.token})
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


@pytest.mark.django_db
def test_one_metadata_document_without_implicit_or_password(client):
    response = client.get("/.well-known/oauth-authorization-server")
    assert response.status_code == 200
    metadata = response.json()
    assert metadata["issuer"] == "http://testserver"
    assert metadata["authorization_endpoint"] == "http://testserver/o/authorize/"
    assert metadata["token_endpoint"] == "http://testserver/o/token/"
    assert metadata["response_types_supported"] == ["code"]
    assert "implicit" not in metadata["grant_types_supported"]
    assert "password" not in metadata["grant_types_supported"]
    assert metadata["authorization_response_iss_parameter_supported"] is True
    # The second document (issuer …/o) and the OIDC routes (OIDC is off) are gone: 404, not 500.
    for path in (
        "/o/.well-known/oauth-authorization-server",
        "/o/.well-known/openid-configuration",
        "/o/.well-known/jwks.json",
        "/o/userinfo/",
        "/o/logout/",
    ):
        assert client.get(path).status_code == 404, path


def test_password_grant_is_refused(client, user, db):
    from oauth2_provider.models import AccessToken, Application

    Application.objects.create(
        name="legacy",
        user=user,
        client_id="legacy-client",
        client_secret="legacy-secret",
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_PASSWORD,
    )
    before = AccessToken.objects.count()
    response = client.post(
        "/o/token/",
        {
            "grant_type": "password",
            "username": "alice",
            "password": "pw-alice",
            "client_id": "legacy-client",
            "client_secret": "legacy-secret",
        },
    )
    assert response.status_code == 400
    assert response.json()["error"] in {"unsupported_grant_type", "unauthorized_client"}
    assert AccessToken.objects.count() == before


def test_implicit_grant_is_refused(client, user, db):
    from oauth2_provider.models import AccessToken, Application

    Application.objects.create(
        name="spa",
        user=user,
        client_id="spa-client",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_IMPLICIT,
        redirect_uris="http://127.0.0.1:9999/callback",
    )
    client.force_login(user)
    before = AccessToken.objects.count()
    response = client.post(
        "/o/authorize/",
        {
            "client_id": "spa-client",
            "response_type": "token",
            "redirect_uri": "http://127.0.0.1:9999/callback",
            "scope": "read:actions",
            "allow": "Authorize",
        },
    )
    assert "access_token" not in response.get("Location", "")
    assert "access_token" not in response.content.decode()
    assert AccessToken.objects.count() == before


def test_issued_tokens_are_stored_as_checksums_only(client, user, db):
    from oauth2_provider.models import AccessToken, Application, RefreshToken

    Application.objects.create(
        name="agent",
        user=user,
        client_id="agent-client",
        client_secret="agent-secret",
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1:9999/callback",
    )
    verifier = secrets.token_urlsafe(48)
    challenge = (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    )
    client.force_login(user)
    authorized = client.post(
        "/o/authorize/",
        {
            "client_id": "agent-client",
            "response_type": "code",
            "redirect_uri": "http://127.0.0.1:9999/callback",
            "scope": "read:actions",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "allow": "Authorize",
        },
    )
    assert authorized.status_code == 302
    query = parse_qs(urlsplit(authorized["Location"]).query)
    assert query["iss"] == ["http://testserver"]  # RFC 9207, the metadata's issuer
    client.logout()
    issued = client.post(
        "/o/token/",
        {
            "grant_type": "authorization_code",
            "code": query["code"][0],
            "redirect_uri": "http://127.0.0.1:9999/callback",
            "client_id": "agent-client",
            "client_secret": "agent-secret",
            "code_verifier": verifier,
        },
    ).json()
    stored = AccessToken.objects.get(user=user)
    assert stored.token == ""
    assert stored.token_checksum == hashlib.sha256(issued["access_token"].encode()).hexdigest()
    assert RefreshToken.objects.get(user=user).token == ""
    # The hashed token still authenticates (by checksum).
    response = client.get(
        f"/api/v1/actions/{uuid.uuid4()}",
        HTTP_AUTHORIZATION=f"Bearer {issued['access_token']}",
    )
    assert response.status_code == 404


# --- item 8: login ---------------------------------------------------------------------------


@pytest.fixture
def fresh_cache():
    from django.core.cache import cache

    cache.clear()
    yield cache
    cache.clear()


def test_login_lands_on_the_front_door(client, user, fresh_cache):
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_twenty_wrong_passwords_lock_the_username_out_for_that_address(
    client, user, fresh_cache, settings
):
    from django.contrib.sessions.models import Session

    def signed_in() -> bool:
        return any(s.get_decoded().get("_auth_user_id") for s in Session.objects.all())

    for _ in range(20):
        response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
        assert response.status_code in {200, 429}
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()
    assert not signed_in()
    # The admin's login form goes through the same limiter.
    admin = client.post("/admin/login/", {"username": "alice", "password": "pw-alice"})
    assert "Too many failed sign-ins" in admin.content.decode()
    assert not signed_in()
    # Another address is not locked out by these failures.
    other = client.post(
        "/accounts/login/",
        {"username": "alice", "password": "pw-alice"},
        REMOTE_ADDR="192.0.2.7",
    )
    assert other.status_code == 302


def test_fewer_failures_than_the_limit_do_not_lock_out(client, user, fresh_cache, settings):
    for _ in range(settings.LOGIN_MAX_FAILURES - 1):
        client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 302
