"""Fixtures shared by every app's tests: users, OAuth clients and tokens, a staff client, an
API client with a bearer token, the event channel, the local chain."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.utils import timezone

from chain.stack import LocalChain, LocalWorld, free_port


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, so a missing marker is never hidden
def pytest_collection_modifyitems(config, items):
    # `make test-fast` (-m "not chain") must run where the chain stack cannot start: a test
    # that reaches the `chain` fixture without the marker would break it there, so say so now.
    unmarked = [
        item.nodeid
        for item in items
        if "chain" in getattr(item, "fixturenames", ()) and item.get_closest_marker("chain") is None
    ]
    if unmarked:
        raise pytest.UsageError(
            "these tests use the `chain` fixture but are not marked `chain` "
            "(add pytest.mark.chain):\n  " + "\n  ".join(unmarked)
        )

    from django.conf import settings

    if "postgresql" in settings.DATABASES["default"]["ENGINE"]:
        return
    if os.environ.get("PICNIC_REQUIRE_POSTGRES") == "1":
        raise pytest.UsageError("PICNIC_REQUIRE_POSTGRES=1 but DATABASE_URL is not PostgreSQL")
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL=postgres://…)")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def celery_test_queue():
    """Tasks enqueued by tests go to a queue of their own, purged at the end, so a broker
    shared with a running `make run` (or an earlier CI run) never mixes work."""
    from picnic.celery import app

    name = f"picnic-test-{uuid.uuid4().hex[:8]}"
    app.conf.task_default_queue = name
    # Every task, whatever its production queue (settings.CELERY_TASK_ROUTES), goes there too.
    app.conf.task_routes = {"*": {"queue": name}}
    app.amqp.flush_routes()
    app.amqp.__dict__.pop("router", None)  # a cached Router keeps the old table
    yield name
    try:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(name)
    except Exception:  # noqa: BLE001 - best-effort cleanup of a broker we may not reach
        pass


# RabbitMQ for the tests that run on both brokers (`celery_broker`): the machine's broker,
# in a vhost of the session's own. PICNIC_TEST_AMQP_URL names another server (no vhost part).
AMQP_TEST_URL = os.environ.get("PICNIC_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672")


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def rabbitmq_url():
    """An amqp:// URL of a vhost made for this test session (rabbitmqctl add_vhost), deleted at
    the end, so nothing else on the broker is touched. Skips when RabbitMQ is not reachable."""
    url = urlsplit(AMQP_TEST_URL)
    try:
        socket.create_connection((url.hostname, url.port or 5672), timeout=2).close()
    except OSError:
        pytest.skip(f"RabbitMQ is not reachable at {url.hostname}:{url.port or 5672}")
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed (it makes the test vhost)")
    vhost = f"picnic-test-{uuid.uuid4().hex[:8]}"
    _rabbitmqctl("add_vhost", vhost)
    _rabbitmqctl("set_permissions", "-p", vhost, url.username or "guest", ".*", ".*", ".*")
    yield f"{AMQP_TEST_URL}/{vhost}"
    _rabbitmqctl("delete_vhost", vhost)


def use_broker(settings, monkeypatch, url: str) -> None:
    """Point this process's Celery app, and the settings a worker started by the test inherits,
    at the broker `url` (redis:// or amqp://), with the settings RabbitMQ needs (what
    picnic/settings.py does at start-up; pytest-django's `settings` and `monkeypatch` undo
    their part, `celery_broker` the app's)."""
    from picnic.brokers import amqp_celery_settings, publish_bound_settings
    from picnic.celery import app

    extra = {"broker_transport_options": {}}
    if url.startswith("amqp://"):
        extra = amqp_celery_settings(
            queues=settings.CELERY_QUEUES_BY_KIND.values(),
            prefix=settings.CELERY_QUEUE_PREFIX,
            delivery_limit=settings.CELERY_DELIVERY_LIMIT,
        )
    # Its publishes bounded as in production (a Redis broker's timeouts are transport options).
    bound = publish_bound_settings(url, settings.BROKER_TIMEOUT_SECONDS)
    extra["broker_transport_options"] |= bound.pop("broker_transport_options", {})
    extra |= bound
    # The URL's scheme names the transport (the filesystem default names its own class).
    extra["broker_transport"] = None
    settings.CELERY_BROKER_URL = url
    monkeypatch.setenv("CELERY_BROKER_URL", url)  # Celery reads it before its own setting
    settings.CELERY_BROKER_TRANSPORT = None
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = extra["broker_transport_options"]
    app.conf.update(broker_url=url, **extra)
    _forget_broker(app)


@pytest.fixture
def celery_app_restored():
    """Whatever a test points the Celery app at (`use_broker`), it is pointed back after."""
    from picnic.celery import app

    saved = {key: app.conf[key] for key in AMQP_CONF_KEYS}
    yield app
    app.conf.update(saved)
    _forget_broker(app)


def _forget_broker(app) -> None:
    # Celery caches the connection pools and the queue table it built for the old broker.
    app.__dict__.pop("pool", None)
    app._pool = None
    app.amqp._producer_pool = None
    for cached in ("queues", "default_queue", "router"):
        app.amqp.__dict__.pop(cached, None)
    app.amqp.flush_routes()


@pytest.fixture
def switch_broker(settings, monkeypatch, celery_app_restored):
    """`switch_broker(url)` points the test's Celery app and its workers at another broker."""
    return lambda url: use_broker(settings, monkeypatch, url)


@pytest.fixture(params=["configured", "amqp"])
def celery_broker(request, settings, monkeypatch, celery_test_queue):
    """Runs a test once on each broker and returns its URL: `configured` is CELERY_BROKER_URL
    as given (Redis in CI), `amqp` RabbitMQ with quorum queues in the session's vhost (skipped
    with the reason when RabbitMQ is not reachable). Workers the test starts inherit it."""
    if request.param == "configured":
        yield settings.CELERY_BROKER_URL
        return
    request.getfixturevalue("celery_app_restored")
    use_broker(settings, monkeypatch, request.getfixturevalue("rabbitmq_url"))
    yield settings.CELERY_BROKER_URL


AMQP_CONF_KEYS = (
    "broker_url",
    "broker_transport",
    "broker_transport_options",
    "broker_connection_timeout",
    "task_publish_retry_policy",
    "task_queues",
    "task_default_queue_type",
    "task_default_exchange_type",
    "task_create_missing_queue_type",
    "task_create_missing_queue_exchange_type",
    "task_reject_on_worker_lost",
    "worker_detect_quorum_queues",
)


@pytest.fixture(autouse=True)
def no_span_left_current():
    """A test that leaves an OpenTelemetry span current fails, and the next test starts outside
    any trace: a span left current in the test thread is a span a real thread would have kept
    too (every later request or batch logged under its trace id)."""
    yield
    from opentelemetry import context, trace

    left = trace.get_current_span().get_span_context()
    if left.is_valid:
        context.attach(context.Context())
        pytest.fail(f"a span was left current: trace {left.trace_id:032x}")


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing():
    """Most tests make users; PBKDF2 is slow on purpose (~0.3 s a user), which tests don't need.
    Logins still check passwords, with a cheap hasher."""
    from django.test.utils import override_settings

    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete():
    """A transactional test (`live_server`, `transaction=True`) ends with Django's flush: on
    PostgreSQL one TRUNCATE of every table, which makes new files for each table and index and
    takes 0.5-5 s a test. DELETE empties the same test-sized tables in milliseconds, in one
    transaction: Django's foreign keys are DEFERRABLE INITIALLY DEFERRED, so the order does not
    matter (a key that is not would fail the flush loudly). Sequences are not reset either way;
    a flush asked to reset them or to cascade stays a TRUNCATE."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if not tables or reset_sequences or allow_cascade:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        delete = style.SQL_KEYWORD("DELETE FROM")
        return ["SET CONSTRAINTS ALL DEFERRED"] + [
            f"{delete} {style.SQL_FIELD(self.quote_name(table))};" for table in tables
        ]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


@pytest.fixture(scope="session")
def chain_world(tmp_path_factory) -> LocalWorld:
    """The real local world on free loopback ports, once per test session: the card's chain
    (31337) and the L2-like chain (31338), each with its node and bundler."""
    world = LocalWorld.on_ports(
        card_rpc_port=free_port(),
        card_bundler_port=free_port(),
        l2_rpc_port=free_port(),
        l2_bundler_port=free_port(),
        workdir=Path(tmp_path_factory.mktemp("chain")),
    )
    world.start()
    yield world
    world.stop()


@pytest.fixture(scope="session")
def chain(chain_world) -> LocalChain:
    """The card's chain of the local world (the one chain most tests need)."""
    return chain_world.card


@pytest.fixture(scope="session")
def l2_chain(chain_world) -> LocalChain:
    """The L2-like chain of the local world."""
    return chain_world.l2


@pytest.fixture
def chain_settings(chain_world, settings):
    """settings.CHAINS pointed at the local world's two chains (the card's chain first);
    returns the card's chain."""
    from core import chains

    table = settings.CHAINS
    for local in chain_world.chains:
        table = chains.with_endpoints(
            local.chain_id, rpc_url=local.rpc_url, bundler_url=local.bundler_url, table=table
        )
    settings.CHAINS = table
    settings.CARD_CHAIN_ID = chain_world.card.chain_id
    # The legacy one-chain globals, while code outside the chain table may still read them.
    settings.CHAIN_ID = chain_world.card.chain_id
    settings.CHAIN_RPC_URL = chain_world.card.rpc_url
    settings.BUNDLER_RPC_URL = chain_world.card.bundler_url
    # A real bundler on a busy 2-core CI machine: generous, still bounded.
    settings.BUNDLER_TIMEOUT_SECONDS = 15
    return chain_world.card


@pytest.fixture
def make_user(db, django_user_model):
    def make(username: str, **extra):
        return django_user_model.objects.create_user(
            username=username, email=f"{username}@example.test", password="pw-" + username, **extra
        )

    return make


@pytest.fixture
def user(make_user):
    return make_user("alice")


@pytest.fixture
def other_user(make_user):
    return make_user("bob")


@pytest.fixture
def staff_user(make_user):
    return make_user("sam", is_staff=True, is_superuser=True)


@pytest.fixture
def make_application(db):
    from oauth2_provider.models import Application

    def make(name: str = "agent", user=None):
        return Application.objects.create(
            name=name,
            user=user,
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
            redirect_uris="http://127.0.0.1:9999/callback",
        )

    return make


@pytest.fixture
def application(make_application):
    return make_application("mcp-agent")


@pytest.fixture
def make_token(db):
    from oauth2_provider.models import AccessToken

    def make(
        user,
        application,
        scope: str = "read:actions",
        expires_in: int = 3600,
        resource: list[str] | None = None,
    ):
        """`resource`: the token's RFC 8707 audience (by default the API's, as a token asked
        for without `resource` gets; `[]`: an unbound token, which nothing accepts)."""
        return AccessToken.objects.create(
            user=user,
            application=application,
            token=secrets.token_urlsafe(32),
            scope=scope,
            expires=timezone.now() + timedelta(seconds=expires_in),
            resource=[settings.PUBLIC_BASE_URL] if resource is None else resource,
        )

    return make


class ApiClient:
    """Django's test client calling the HTTP APIs as an agent would: every call carries
    `token` (an AccessToken, or a raw string for the bad-token cases) as an OAuth2 bearer
    token, and a body goes as JSON."""

    def __init__(self, client):
        self.client = client

    @staticmethod
    def _auth(token) -> dict:
        return {"HTTP_AUTHORIZATION": f"Bearer {getattr(token, 'token', token)}"}

    def get(self, path: str, token, query: dict | None = None, **extra):
        return self.client.get(path, query, **self._auth(token), **extra)

    def post(self, path: str, token, body=None, **extra):
        return self.client.post(
            path,
            json.dumps({} if body is None else body),
            content_type="application/json",
            **self._auth(token),
            **extra,
        )


@pytest.fixture
def api_client(client) -> ApiClient:
    """`api_client.get(path, token, query)`, `api_client.post(path, token, body)`."""
    return ApiClient(client)


@pytest.fixture
def staff_client(client, staff_user):
    """The test client logged in as a superuser (the admin and the staff pages)."""
    client.force_login(staff_user)
    return client


@pytest.fixture
def published(monkeypatch) -> list[dict]:
    """What goes on the event channel."""
    from core import events

    seen: list[dict] = []
    monkeypatch.setattr(events, "publish", seen.append)
    return seen


@pytest.fixture(autouse=True)
def roomy_oauth_throttles(settings):
    """Every test talks to the token endpoint and fetches metadata documents from 127.0.0.1,
    and the locmem counts outlive a test: a whole run would pass a minute's budget. The
    throttle tests set their own limits."""
    settings.OAUTH2_TOKEN_PER_MINUTE = 1_000_000
    settings.OAUTH2_TOKEN_PER_CLIENT_PER_MINUTE = 1_000_000
    settings.OAUTH2_CIMD_FETCHES_PER_MINUTE = 1_000_000
