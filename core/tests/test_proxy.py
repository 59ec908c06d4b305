"""The client's address and the login throttles keyed on it. The real
HAProxy in front of gunicorn: picnic/tests/test_proxy.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.sessions.models import Session

from core.proxy import client_address

ROOT = Path(__file__).resolve().parents[2]
PROXIES = ["10.0.0.0/8", "192.0.2.10/32"]


@pytest.fixture
def proxies(settings):
    import ipaddress

    settings.TRUSTED_PROXY_IPS = tuple(ipaddress.ip_network(n) for n in PROXIES)


@pytest.fixture
def fresh_cache():
    from django.core.cache import cache

    cache.clear()
    yield cache
    cache.clear()


def test_without_trusted_proxies_a_forwarded_for_is_never_believed(settings):
    assert settings.TRUSTED_PROXY_IPS == ()
    assert client_address("127.0.0.1", "198.51.100.7") == "127.0.0.1"


@pytest.mark.parametrize(
    "peer, forwarded_for, client",
    [
        # A client that is no proxy of ours: its header is its own words.
        ("198.51.100.7", "203.0.113.1", "198.51.100.7"),
        # Our proxy appended the address it saw; what the client wrote is left of it.
        ("10.0.0.5", "203.0.113.1, 198.51.100.7", "198.51.100.7"),
        # Two proxies of ours in a row: the first address that is not one of them.
        ("10.0.0.5", "203.0.113.1, 198.51.100.7, 192.0.2.10", "198.51.100.7"),
        ("10.0.0.5", "[2001:db8::1]:443", "2001:db8::1"),
        ("10.0.0.5", "198.51.100.7:5555", "198.51.100.7"),
        # Junk where a proxy of ours would have written an address: the proxy is the client.
        ("10.0.0.5", "198.51.100.7, not-an-address", "10.0.0.5"),
        ("10.0.0.5", "", "10.0.0.5"),
        # Only proxies of ours: the leftmost of them (a health check from the proxy itself).
        ("10.0.0.5", "10.1.1.1", "10.1.1.1"),
    ],
)
def test_the_client_is_the_rightmost_address_that_is_not_a_trusted_proxy(
    proxies, peer, forwarded_for, client
):
    assert client_address(peer, forwarded_for) == client


@pytest.mark.django_db
def test_the_middleware_sets_remote_addr_before_the_views_read_it(client, proxies):
    response = client.get(
        "/healthz", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="1.2.3.4, 198.51.100.7"
    )
    assert response.wsgi_request.META["REMOTE_ADDR"] == "198.51.100.7"
    response = client.get("/healthz", REMOTE_ADDR="198.51.100.8", HTTP_X_FORWARDED_FOR="1.2.3.4")
    assert response.wsgi_request.META["REMOTE_ADDR"] == "198.51.100.8"


@pytest.mark.django_db
def test_only_a_trusted_proxy_may_say_the_request_came_over_https(client, proxies, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    claims = {"HTTP_X_FORWARDED_PROTO": "https", "HTTP_FORWARDED": "for=1.2.3.4"}
    response = client.get("/healthz", REMOTE_ADDR="198.51.100.7", **claims)
    assert not response.wsgi_request.is_secure()
    assert "HTTP_FORWARDED" not in response.wsgi_request.META
    response = client.get("/healthz", REMOTE_ADDR="10.0.0.5", **claims)
    assert response.wsgi_request.is_secure()


def _start_up(**env: str) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "import picnic.gunicorn_conf as g; "
        "print([str(n) for n in settings.TRUSTED_PROXY_IPS], repr(g.forwarded_allow_ips))"
    )
    environ = {k: v for k, v in os.environ.items() if k != "FORWARDED_ALLOW_IPS"}
    environ |= {"DJANGO_SETTINGS_MODULE": "picnic.settings", **env}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True
    )


def test_trusted_proxies_are_networks_from_the_environment_and_gunicorn_trusts_the_same():
    result = _start_up(TRUSTED_PROXY_IPS="")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["[]", "''"]
    result = _start_up(TRUSTED_PROXY_IPS="10.0.0.0/8, 127.0.0.1")
    assert result.returncode == 0, result.stderr
    assert "['10.0.0.0/8', '127.0.0.1/32'] '10.0.0.0/8,127.0.0.1/32'" in result.stdout


@pytest.mark.parametrize(
    "env",
    [
        {"TRUSTED_PROXY_IPS": "*"},
        {"TRUSTED_PROXY_IPS": "10.0.0.5/8"},  # host bits set: a typo for 10.0.0.0/8?
        {"TRUSTED_PROXY_IPS": "haproxy.internal"},
        {"FORWARDED_ALLOW_IPS": "127.0.0.1"},  # the old name, no longer read
        # Behind a proxy that no setting names: its X-Forwarded-Proto would be dropped.
        {"DJANGO_BEHIND_TLS_PROXY": "true", "TRUSTED_PROXY_IPS": ""},
    ],
)
def test_a_bad_trusted_proxy_setting_stops_start_up(env):
    result = _start_up(**env)
    assert result.returncode != 0
    assert next(iter(env)) in result.stderr


# --- the login throttles --------------------------------------------------------------------


def _signed_in() -> bool:
    return any(s.get_decoded().get("_auth_user_id") for s in Session.objects.all())


def _login(client, username: str, password: str, address: str):
    return client.post(
        "/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address
    )


def test_one_address_guessing_many_usernames_is_stopped(client, make_user, fresh_cache, settings):
    settings.LOGIN_MAX_FAILURES_PER_ADDRESS = 6
    make_user("alice")
    for i in range(6):  # never more than 1 per username: under the per-username limit
        assert _login(client, f"user{i}", "wrong", "198.51.100.7").status_code == 200
    assert _login(client, "alice", "pw-alice", "198.51.100.7").status_code == 429
    assert not _signed_in()
    assert _login(client, "alice", "pw-alice", "198.51.100.8").status_code == 302


def test_many_addresses_guessing_one_account_lock_it_but_not_for_a_known_device(
    client, make_user, fresh_cache, settings
):
    settings.LOGIN_MAX_FAILURES_PER_ACCOUNT = 8
    make_user("alice")
    # Alice signed in once from her browser: it holds her signed device cookie.
    assert _login(client, "alice", "pw-alice", "203.0.113.9").status_code == 302
    device = client.cookies["picnic_login_device"].value
    client.logout()
    client.cookies.clear()
    for i in range(8):  # 8 addresses, 1 failure each
        assert _login(client, "alice", "wrong", f"198.51.100.{i}").status_code == 200
    # A new address, a new browser: the account is locked.
    assert _login(client, "alice", "pw-alice", "198.51.100.200").status_code == 429
    assert not _signed_in()
    # A forged device cookie is an unknown device.
    client.cookies["picnic_login_device"] = device[:-2] + "xx"
    assert _login(client, "alice", "pw-alice", "203.0.113.9").status_code == 429
    # Her browser, even from a new address, gets through the account lock.
    client.cookies["picnic_login_device"] = device
    assert _login(client, "alice", "pw-alice", "198.51.100.201").status_code == 302
    assert _signed_in()


# --- the API's throttles -------------------------------------------------------------------


def test_drf_throttles_identify_the_client_by_the_resolved_address_only(rf):
    from rest_framework.request import Request
    from rest_framework.throttling import AnonRateThrottle

    request = rf.get("/", REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_FOR="203.0.113.1")
    # DRF's default (NUM_PROXIES unset) believed the header: one new identity per request.
    assert AnonRateThrottle().get_ident(Request(request)) == "198.51.100.7"


@pytest.mark.django_db
def test_token_guessing_spread_over_addresses_is_stopped_per_client(
    client, application, fresh_cache, settings
):
    settings.OAUTH2_TOKEN_PER_MINUTE = 3
    settings.OAUTH2_TOKEN_PER_CLIENT_PER_MINUTE = 6
    body = {"grant_type": "authorization_code", "code": "guess", "redirect_uri": "x"}
    statuses = []
    for i in range(8):  # 2 a address: under the address limit
        form = {**body, "client_id": application.client_id}
        statuses.append(client.post("/o/token/", form, REMOTE_ADDR=f"198.51.100.{i // 2}"))
    assert [r.status_code for r in statuses[6:]] == [429, 429]
    assert statuses[-1].json()["error"] == "too_many_requests"
    assert all(r.status_code in (400, 401) for r in statuses[:6])  # refused, not throttled
    # Another client named from one of those addresses is not held.
    other = client.post("/o/token/", {**body, "client_id": "another"}, REMOTE_ADDR="198.51.100.9")
    assert other.status_code != 429


@pytest.mark.django_db
def test_a_forwarded_for_from_an_unnamed_private_peer_is_ignored_and_logged_once(client, caplog):
    # What a forgotten TRUSTED_PROXY_IPS looks like: HAProxy on 10.0.0.5 is not believed.
    with caplog.at_level("WARNING", logger="core.proxy"):
        for _ in range(3):
            response = client.get(
                "/healthz", REMOTE_ADDR="10.0.0.5", HTTP_X_FORWARDED_FOR="198.51.100.7"
            )
            assert response.wsgi_request.META["REMOTE_ADDR"] == "10.0.0.5"
        client.get("/healthz", REMOTE_ADDR="198.51.100.8", HTTP_X_FORWARDED_FOR="1.2.3.4")
    warnings = [r for r in caplog.records if "TRUSTED_PROXY_IPS does not name" in r.message]
    assert len(warnings) == 1 and "10.0.0.5" in warnings[0].getMessage()
