"""The proxy owns the client's address: the shipped HAProxy
configuration in front of the real gunicorn, a client forging X-Forwarded-For."""

from __future__ import annotations

import http.client
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from chain.stack import free_port
from dev import cluster, processes
from dev.testing import ScriptedServer, process_env, wait_until
from evm.userops import entry_point_address

pytestmark = pytest.mark.skipif(
    not Path(cluster.HAPROXY).exists(), reason="needs Debian's haproxy (make deps)"
)

VICTIM_ADDRESS = "127.0.0.2"  # loopback is a /8: a second client address on this machine


def make_alice():
    # The web process knows the production hashers, not the tests' cheap one.
    hasher = PBKDF2PasswordHasher()
    password = hasher.encode("pw-alice", hasher.salt())
    return get_user_model().objects.create(username="alice", password=password)


class Browser:
    """A login form client from one source address, keeping its cookies."""

    def __init__(self, port: int, source: str = "127.0.0.1"):
        self.port, self.source = port, source
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str = "", headers=None):
        conn = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=30, source_address=(self.source, 0)
        )
        try:
            headers = {**(headers or {})}
            if self.cookies:
                headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            if body:
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            for name, value in response.getheaders():
                if name.lower() == "set-cookie":
                    cookie = value.split(";", 1)[0]
                    key, _, val = cookie.partition("=")
                    self.cookies[key] = val
            return response.status, response.read().decode(errors="replace")
        finally:
            conn.close()

    def login(self, username: str, password: str, headers=None) -> int:
        status, page = self.request("GET", "/accounts/login/", headers=headers)
        assert status == 200, page[:500]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        body = f"csrfmiddlewaretoken={token}&username={username}&password={password}"
        return self.request("POST", "/accounts/login/", body, headers)[0]


@pytest.fixture
def proxied_web(tmp_path):
    """One gunicorn web behind HAProxy with the shipped configuration (its health check on
    /readyz: a scripted node and bundler answer for the card's chain); HAProxy's port."""
    web_port, front_port, mcp_port = free_port(), free_port(), free_port()
    socket_dir = Path(tempfile.mkdtemp(prefix="picnic-haproxy-"))
    with ScriptedServer() as chain:
        chain.results = {
            "eth_chainId": hex(31337),
            "eth_supportedEntryPoints": [entry_point_address("0.7")],
        }
        env = process_env(
            {
                "DJANGO_DEBUG": "true",
                "TRUSTED_PROXY_IPS": "127.0.0.1/32",
                "CHAIN_ID": "31337",
                "ENTRY_POINT_VERSION": "0.7",
                "CHAIN_RPC_URL": chain.url,
                "BUNDLER_RPC_URL": chain.url,
            }
        )
        web = processes.gunicorn(env, tmp_path / "web.log", bind=f"127.0.0.1:{web_port}")
        config = tmp_path / "haproxy.cfg"
        config.write_text(
            cluster.haproxy_config(
                stats_socket=socket_dir / "admin.sock",
                web_port=front_port,
                mcp_port=mcp_port,
                web_servers={"web-1": web_port},
                mcp_servers={},
            )
        )
        proxy = processes.Process(
            "haproxy", [cluster.HAPROXY, "-db", "-f", str(config)], env, tmp_path / "haproxy.log"
        )
        try:
            web.start()
            proxy.start()
            front = f"http://127.0.0.1:{front_port}"
            wait_until(lambda: processes.answers(f"{front}/healthz"), timeout=60)
            yield front_port
        finally:
            proxy.stop()
            web.stop()
            shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.mark.django_db(transaction=True)
def test_through_haproxy_a_forged_forwarded_for_does_not_dodge_the_login_throttle(
    proxied_web, settings
):
    user = make_alice()
    attacker = Browser(proxied_web)
    statuses = []
    for attempt in range(4 * settings.LOGIN_MAX_FAILURES):
        forged = {"X-Forwarded-For": f"198.51.100.{attempt}", "X-Real-IP": f"10.0.0.{attempt}"}
        statuses.append(attacker.login("alice", "wrong", headers=forged))
    # Wrong passwords answer 200 (the form again) until the limit, then 429 every time.
    limit = settings.LOGIN_MAX_FAILURES
    assert statuses == [200] * limit + [429] * (len(statuses) - limit)
    forged = {"X-Forwarded-For": "198.51.100.250"}
    assert attacker.login("alice", "pw-alice", headers=forged) == 429
    user.refresh_from_db()
    assert user.last_login is None


@pytest.mark.django_db(transaction=True)
def test_through_haproxy_a_forged_forwarded_for_cannot_lock_a_victim_out(proxied_web, settings):
    user = make_alice()
    attacker = Browser(proxied_web)
    # The attacker names the victim's address and the proxy's (the address every client had
    # when HAProxy set no header of its own).
    for attempt in range(3 * settings.LOGIN_MAX_FAILURES):
        forged = {"X-Forwarded-For": [VICTIM_ADDRESS, "127.0.0.1"][attempt % 2]}
        attacker.login("alice", "wrong", headers=forged)
    assert attacker.login("alice", "pw-alice") == 429
    victim = Browser(proxied_web, source=VICTIM_ADDRESS)
    assert victim.login("alice", "pw-alice") == 302
    user.refresh_from_db()
    assert user.last_login is not None
