"""`make test`'s two lanes (dev/lanes.py) never share a database."""

from __future__ import annotations

from dev.lanes import SLOW, lane_env


def test_the_second_lane_gets_its_own_postgresql_and_redis_databases():
    env = lane_env(
        {
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
            "PATH": "/usr/bin",
        }
    )
    assert env["DATABASE_URL"] == "postgres://postgres@127.0.0.1:5432/test_lane2"
    assert env["CELERY_BROKER_URL"] == "redis://127.0.0.1:6379/1"
    assert env["PATH"] == "/usr/bin"
    # The last Redis database wraps around; no number means database 0, so 1.
    assert lane_env({"CELERY_BROKER_URL": "redis://h:6379/15"})["CELERY_BROKER_URL"].endswith("/0")
    assert lane_env({"CELERY_BROKER_URL": "redis://h:6379"})["CELERY_BROKER_URL"].endswith("/1")


def test_other_brokers_and_databases_are_left_as_they_are():
    given = {"DATABASE_URL": "sqlite:///var/db.sqlite3", "CELERY_BROKER_URL": "amqp://h//"}
    assert lane_env(given) == given


def test_the_slow_lane_is_what_waits_on_servers_it_starts():
    assert {m.strip() for m in SLOW.split(" or ")} == {"chain", "chaos", "soak", "browser"}
