"""Settings for stores with more than one node: libpq's multi-host DATABASE_URL, Sentinel URLs
for EVENTS_URL, CACHE_URL and CELERY_BROKER_URL, the broker's list of RabbitMQ nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from picnic import env

ROOT = Path(__file__).resolve().parents[2]
SENTINELS = "sentinel://127.0.0.1:26379/3;sentinel://127.0.0.1:26380/3;sentinel://127.0.0.1:26381"
MULTI_HOST = "postgres://app:pw@10.0.0.1:5433,10.0.0.2/picnic?target_session_attrs=read-write"


def test_a_multi_host_database_url_becomes_libpqs_host_and_port_lists():
    config = env.database_settings("DATABASE_URL", MULTI_HOST, conn_max_age=60)

    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert config["HOST"] == "10.0.0.1,10.0.0.2"
    assert config["PORT"] == "5433,5432"
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("picnic", "app", "pw")
    assert config["OPTIONS"] == {"target_session_attrs": "read-write"}
    assert config["CONN_MAX_AGE"] == 60


def test_one_host_is_parsed_as_before():
    url = "postgres://app@10.0.0.1:5433/picnic"
    config = env.database_settings("DATABASE_URL", url)
    assert (config["HOST"], config["PORT"]) == ("10.0.0.1", 5433)


def test_several_hosts_without_read_write_are_refused():
    url = "postgres://app@10.0.0.1,10.0.0.2/picnic"
    with pytest.raises(ImproperlyConfigured, match="target_session_attrs=read-write"):
        env.database_settings("DATABASE_URL", url)


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("DATABASE_URL", "postgres://app@10.0.0.1:5432,10.0.0.2:x/db", "invalid port"),
        ("DATABASE_URL", "postgres://app@10.0.0.1:5432,:5432/db", "has no host"),
        ("EVENTS_URL", "sentinel://127.0.0.1:26379;redis://127.0.0.1:6379", "sentinel://"),
        ("CACHE_URL", "sentinel://127.0.0.1", "needs a host and a port"),
        ("CACHE_URL", "sentinel://127.0.0.1:26379/1;sentinel://h:26380/2", "different databases"),
        ("CELERY_BROKER_URL", "sentinel://127.0.0.1:26379/x", "must be a number"),
        ("CELERY_BROKER_URL", "amqp://g:g@127.0.0.1:5672//;amqp://:x//", "has no host"),
    ],
)
def test_a_bad_node_list_is_refused_naming_the_variable(monkeypatch, variable, value, said):
    monkeypatch.setenv(variable, value)
    schemes = ("postgres", "redis", "sentinel", "amqp")
    with pytest.raises(ImproperlyConfigured, match=said) as raised:
        env.env_url(variable, "", schemes=schemes)
    assert str(raised.value).startswith(variable)


def _settings(**environ: str) -> dict:
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({'db': s.DATABASES['default'], 'cache': s.CACHES['default'], "
        "'broker': s.CELERY_BROKER_URL, 'options': s.CELERY_BROKER_TRANSPORT_OPTIONS, "
        "'events': s.EVENTS_URL, 'master': s.REDIS_SENTINEL_MASTER, "
        "'connect_timeout': s.CELERY_BROKER_CONNECTION_TIMEOUT, "
        "'retry_policy': s.CELERY_TASK_PUBLISH_RETRY_POLICY}, default=str))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, **environ, "DJANGO_SETTINGS_MODULE": "picnic.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_the_settings_take_sentinels_and_a_multi_host_database():
    seen = _settings(
        DATABASE_URL=MULTI_HOST,
        EVENTS_URL=SENTINELS,
        CACHE_URL=SENTINELS,
        CELERY_BROKER_URL=SENTINELS,
        REDIS_SENTINEL_MASTER="picnic-ha",
    )

    assert seen["db"]["HOST"] == "10.0.0.1,10.0.0.2"
    assert seen["events"] == seen["broker"] == SENTINELS
    # Celery's Redis transport finds the primary by the sentinels it reads from the URL; no
    # command, connect or question to a sentinel waits longer than BROKER_TIMEOUT_SECONDS.
    bounded = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    assert seen["options"] == {"master_name": "picnic-ha", **bounded, "sentinel_kwargs": bounded}
    assert seen["cache"]["LOCATION"] == [SENTINELS]
    assert seen["cache"]["OPTIONS"] == {
        "pool_class": "core.stores.SentinelCachePool",
        "master": "picnic-ha",
    }


def test_the_broker_takes_a_list_of_rabbitmq_nodes():
    nodes = "amqp://g:g@127.0.0.1:5672//;amqp://g:g@127.0.0.1:5673//;amqp://g:g@127.0.0.1:5674//"
    seen = _settings(CELERY_BROKER_URL=nodes)
    assert seen["broker"] == nodes
    assert seen["options"]["confirm_publish"] is True


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("redis://127.0.0.1:6379/0", {"socket_timeout": 1.5, "socket_connect_timeout": 1.5}),
        ("amqp://g:g@127.0.0.1:5672//", {"confirm_publish": True}),
    ],
)
def test_every_broker_bounds_a_publish(url, options):
    # A broker that answers nothing holds no publish: connects and (Redis) commands time out,
    # RabbitMQ's confirm is bounded per publish (picnic.celery.Task), a publish is tried 3 times.
    seen = _settings(CELERY_BROKER_URL=url, BROKER_TIMEOUT_SECONDS="1.5")
    assert seen["connect_timeout"] == 1.5
    assert seen["retry_policy"]["max_retries"] == 2
    assert seen["options"] == options
