"""Two deployments on one Redis share nothing by accident (DEPLOYMENT_PREFIX): neither hears
the other's events, reads the other's cache keys or receives the other's tasks; and within one
deployment the throttles count once across processes. Real Redis (127.0.0.1:6379 or
CI_EVENTS_REDIS_URL), real processes (uvicorn on picnic.asgi, `django.setup()` scripts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from django.test import Client

from actions.execution.models import ACTION_LIFECYCLE
from core import events
from core.lifecycle import Actor, transition
from core.tests.conftest import EVENTS_REDIS_URL, _redis_up
from core.tests.test_live import Stream, _action, _in_another_thread, _session
from dev.testing import database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shared_redis(settings):
    if not _redis_up():
        if os.environ.get("PICNIC_REQUIRE_POSTGRES"):  # CI: the real services must be used
            pytest.fail(f"Redis is not reachable at {EVENTS_REDIS_URL}")
        pytest.skip("needs Redis")
    settings.EVENTS_URL = EVENTS_REDIS_URL
    events._redis_client = None
    client = redis.Redis.from_url(EVENTS_REDIS_URL)
    run = uuid.uuid4().hex[:8]
    prefixes = (f"blue-{run}", f"green-{run}")
    yield client, prefixes
    events._redis_client = None
    for prefix in prefixes:
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)


def _in_deployment(prefix: str, code: str, **env: str) -> dict:
    """Run `code` (which sets `out`) in a fresh process of deployment `prefix` on the shared
    Redis (cache, broker and events); returns `out`."""
    script = (
        "import json, django\ndjango.setup()\nout = {}\n"
        + code
        + "\nprint('OUT ' + json.dumps(out))"
    )
    environ = {
        **{k: v for k, v in os.environ.items() if k != "CELERY_QUEUE_PREFIX"},
        "DJANGO_SETTINGS_MODULE": "picnic.settings",
        "DATABASE_URL": database_url(),
        "DEPLOYMENT_PREFIX": prefix,
        "CACHE_URL": EVENTS_REDIS_URL,
        "CELERY_BROKER_URL": EVENTS_REDIS_URL,
        "EVENTS_URL": EVENTS_REDIS_URL,
        **env,
    }
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    line = [line for line in result.stdout.splitlines() if line.startswith("OUT ")][-1]
    return json.loads(line[4:])


def _changed_ids(stream: Stream, count: int) -> list[str]:
    found = []
    while len(found) < count:
        event = stream.next()
        assert event is not None and event["event"] == "changed", event
        found.append(event["data"]["id"])
    return found


@pytest.mark.django_db(transaction=True)
def test_two_deployments_hear_only_their_own_events_over_one_subscription_each(
    settings, shared_redis, asgi_server, client, staff_user, user, application
):
    redis_client, (blue, green) = shared_redis
    servers = {prefix: asgi_server(DEPLOYMENT_PREFIX=prefix) for prefix in (blue, green)}
    session = _session(client, staff_user)
    streams = {prefix: Stream(servers[prefix].port, "/staff/events", session) for prefix in servers}
    second_blue = Stream(servers[blue].port, "/staff/events", _session(Client(), staff_user))
    for stream in (*streams.values(), second_blue):
        assert stream.next()["data"] == {"connected": True}
    # One subscription per process, however many streams it serves.
    assert redis_client.pubsub_numsub(f"{blue}:events") == [(f"{blue}:events".encode(), 1)]
    assert redis_client.pubsub_numsub(f"{green}:events") == [(f"{green}:events".encode(), 1)]

    published = []
    for prefix in (blue, green, blue, green):
        action = _action(user, application)
        settings.DEPLOYMENT_PREFIX = prefix  # this process publishes as that deployment
        _in_another_thread(
            lambda pk=action.pk: transition(
                lifecycle=ACTION_LIFECYCLE, pk=pk, to="signed", actor=Actor.system()
            )
        )
        published.append(str(action.pk))
    # Each stream gets its deployment's two events in order, and never the other's (which
    # were published in between: they would have come first).
    assert _changed_ids(streams[blue], 2) == [published[0], published[2]]
    assert _changed_ids(second_blue, 2) == [published[0], published[2]]
    assert _changed_ids(streams[green], 2) == [published[1], published[3]]
    for stream in (*streams.values(), second_blue):
        stream.close()


@pytest.mark.django_db(transaction=True)
def test_two_deployments_keep_their_cache_keys_and_tasks_apart(shared_redis):
    redis_client, (blue, green) = shared_redis
    put = (
        "from django.core.cache import cache\n"
        "out['before'] = cache.get('shared-name')\n"
        "cache.set('shared-name', '{prefix}', 60)\n"
        "from picnic.celery import app\n"
        "app.send_task('actions.tasks.actions_purge_retained')\n"
    )
    assert _in_deployment(blue, put.format(prefix=blue)) == {"before": None}
    assert _in_deployment(green, put.format(prefix=green)) == {"before": None}
    read = "from django.core.cache import cache\nout['value'] = cache.get('shared-name')"
    assert _in_deployment(blue, read) == {"value": blue}
    assert _in_deployment(green, read) == {"value": green}
    # The keys and the queues as Redis holds them: each under its deployment's prefix.
    assert redis_client.exists(f"{blue}:1:shared-name", f"{green}:1:shared-name") == 2
    assert redis_client.llen(f"{blue}.housekeeping") == 1
    assert redis_client.llen(f"{green}.housekeeping") == 1
    body = json.loads(redis_client.lindex(f"{blue}.housekeeping", 0))
    assert body["headers"]["task"] == "actions.tasks.actions_purge_retained"


@pytest.mark.django_db(transaction=True)
def test_the_throttles_count_once_across_the_processes_of_a_deployment(shared_redis):
    """Login failures, token requests and metadata fetches counted by one web process hold in
    the next one (and not in another deployment)."""
    _, (blue, green) = shared_redis
    limits = {
        "LOGIN_MAX_FAILURES": "3",
        "OAUTH2_TOKEN_PER_MINUTE": "2",
        "OAUTH2_CIMD_FETCHES_PER_MINUTE": "2",
    }
    step = (
        "from types import SimpleNamespace\n"
        "from core import login\n"
        "from oauth.throttles import CimdFetchBudget, token_refusal\n"
        "request = SimpleNamespace(META={'REMOTE_ADDR': '203.0.113.7'})\n"
        "for _ in range({n}):\n"
        "    login.record_failure(request, 'alice')\n"
        "out['locked_out'] = login.locked_out(request, 'alice')\n"
        "out['token'] = [\n"
        "    getattr(token_refusal(request), 'status_code', 200) for _ in range({n})\n"
        "]\n"
        "out['cimd'] = [\n"
        "    CimdFetchBudget().has_permission(None, 'https://agent.example/client.json')\n"
        "    for _ in range({n})\n"
        "]\n"
    )
    first = _in_deployment(blue, step.replace("{n}", "2"), **limits)
    second = _in_deployment(blue, step.replace("{n}", "1"), **limits)
    other = _in_deployment(green, step.replace("{n}", "1"), **limits)
    assert first == {"locked_out": False, "token": [200, 200], "cimd": [True, True]}
    # The third of each, in another process: over the shared limit.
    assert second == {"locked_out": True, "token": [429], "cimd": [False]}
    # Another deployment on the same Redis starts from nothing.
    assert other == {"locked_out": False, "token": [200], "cimd": [True]}
