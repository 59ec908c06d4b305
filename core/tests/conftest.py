import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings

from chain.stack import free_port
from core import events
from dev.testing import database_url, wait_until
from messaging.tests.conftest import (  # noqa: F401 - shared fixtures (test_metrics)
    member,
    queue,
    social_account,
    workspace,
    x_server,
)

EVENTS_REDIS_URL = os.environ.get("CI_EVENTS_REDIS_URL", "redis://127.0.0.1:6379/0")


def _redis_up() -> bool:
    try:
        return redis.Redis.from_url(EVENTS_REDIS_URL, socket_timeout=1).ping()
    except redis.RedisError:
        return False


@pytest.fixture(params=["local", "redis"])
def backend(request, settings, tmp_path):
    """Both event channels (local sockets, Redis pub/sub); CI must have Redis."""
    if request.param == "redis":
        if not _redis_up():
            if os.environ.get("PICNIC_REQUIRE_POSTGRES"):  # CI: the real services must be used
                pytest.fail(f"Redis is not reachable at {EVENTS_REDIS_URL}")
            pytest.skip("needs Redis")
        settings.EVENTS_URL = EVENTS_REDIS_URL
    else:
        settings.EVENTS_URL = "local://"
        settings.EVENTS_DIR = tmp_path / "events"
    events._redis_client = None
    yield request.param
    events._redis_client = None


class Server:
    """uvicorn serving picnic.asgi for a test (the `asgi_server` fixture)."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path):
        self.proc, self.port, self.log = proc, port, log

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def asgi_server(settings, tmp_path):
    """`start(**env)`: uvicorn serving picnic.asgi on a free port, on the test database and
    this test's event channel."""
    started: list[Server] = []

    def start(**extra: str) -> Server:
        port = free_port()
        log = tmp_path / f"uvicorn-{port}.log"
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SECRET_KEY": django_settings.SECRET_KEY,
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "EVENTS_URL": settings.EVENTS_URL,
            "EVENTS_DIR": str(settings.EVENTS_DIR),
            **extra,
        }
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "picnic.asgi:application",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--no-access-log",
                ],
                cwd=Path(__file__).resolve().parents[2],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Server(proc, port, log)
        started.append(server)

        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                    return True
            except OSError:
                return False

        wait_until(up, timeout=60)
        return server

    yield start
    for server in started:
        server.stop()
