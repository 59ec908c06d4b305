"""Stores with more than one node, on real servers: a Redis primary, its replica and three
sentinels (the client follows a failover by itself), and libpq's multi-host DATABASE_URL
(Django connects to the host that takes writes). What /readyz and /metrics report of them is in
test_health.py and test_metrics.py."""

from __future__ import annotations

import shutil
import time

import pytest
from django.db import connections
from django.db.backends.postgresql.base import DatabaseWrapper

from core import health, stores
from dev import cluster as clusters

needs_redis = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server (Debian's redis-server)"
)


@pytest.fixture
def sentinels(tmp_path):
    group = clusters.ReplicatedRedis(tmp_path / "redis").start()
    yield group
    group.stop()


def _retrying(call, timeout: float = 60):
    """`call()` until it answers (a failover in progress refuses for a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except (
            stores.redis.ConnectionError,
            stores.redis.TimeoutError,
            stores.redis.ReadOnlyError,
        ):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@needs_redis
def test_a_sentinel_url_follows_the_primary_through_a_failover(sentinels):
    url = sentinels.url(db=2)
    client = stores.redis_client(url, master=sentinels.MASTER, socket_timeout=1)
    client.set("before", "1")
    first = stores.redis_node(url, master=sentinels.MASTER)
    assert stores.observe("test-redis", first).changes == 0
    assert client.connection_pool.connection_kwargs["db"] == 2

    killed = sentinels.kill_primary()
    _retrying(lambda: client.set("after", "1"))

    assert sentinels.primary() is not killed and sentinels.primary() is not None
    second = stores.redis_node(url, master=sentinels.MASTER)
    assert {first, second} == {"node 1", "node 2"}
    seen = stores.observe("test-redis", second)
    assert (seen.node, seen.changes) == (second, 1)
    # Written before the kill (the replica had it: replication is asynchronous, so the last
    # writes before a kill may not be) and after it, on the new primary.
    assert client.get("after") == b"1"


@needs_redis
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "asyncio"])
def test_a_command_retried_on_its_connection_after_a_failover_reaches_the_new_primary(
    sentinels, asynchronous
):
    """A pipeline on a connection opened before the primary died: its retries reconnect that
    same connection, which must ask the sentinels again (redis-py's went back to the dead
    address until its retries ran out: an MCP server's event store then failed for good)."""
    import asyncio

    import redis.asyncio.retry
    import redis.retry
    from redis.backoff import ExponentialBackoff

    url = sentinels.url(db=4)
    retry = redis.asyncio.retry.Retry if asynchronous else redis.retry.Retry
    # About 30 s of retries: far longer than the failover takes here (1-2 s).
    options = {"retry": retry(ExponentialBackoff(cap=0.5, base=0.05), retries=60)}
    client = stores.redis_client(
        url, master=sentinels.MASTER, asynchronous=asynchronous, socket_timeout=1, **options
    )

    async def maybe(result):
        return await result if asynchronous else result

    async def run():
        await maybe(client.set("before", "1"))  # its one pooled connection: to the primary
        killed = sentinels.kill_primary()
        pipe = client.pipeline(transaction=True)
        pipe.set("after", "2")
        pipe.get("after")
        assert (await maybe(pipe.execute()))[1] == b"2"
        assert sentinels.primary() is not killed
        if asynchronous:
            await client.aclose()

    asyncio.run(run())


@needs_redis
def test_the_cache_pool_and_an_async_client_reach_the_primary(sentinels):
    import asyncio

    url = sentinels.url(db=3)
    pool = stores.SentinelCachePool.from_url(url, master=sentinels.MASTER)
    sync = stores.redis.Redis(connection_pool=pool)
    sync.set("k", "v")

    async def read():
        client = stores.redis_client(url, master=sentinels.MASTER, asynchronous=True)
        try:
            return await client.get("k")
        finally:
            await client.aclose()

    assert asyncio.run(read()) == b"v"
    assert sync.connection_pool.connection_kwargs["db"] == 3


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_multi_host_database_url_reaches_the_host_that_takes_writes():
    """The first host refuses (nothing listens there): libpq goes on to the next one, which
    takes writes; the readiness check names it by its place in the list."""
    real = connections["default"].settings_dict
    closed = clusters.free_port()
    wrapper = DatabaseWrapper(
        {
            **real,
            "HOST": f"{real['HOST'] or '127.0.0.1'},{real['HOST'] or '127.0.0.1'}",
            "PORT": f"{closed},{real['PORT'] or 5432}",
            "OPTIONS": {**real["OPTIONS"], "target_session_attrs": "read-write"},
        }
    )
    try:
        wrapper.ensure_connection()
        with wrapper.cursor() as cursor:
            cursor.execute("SELECT pg_is_in_recovery()")
            assert cursor.fetchone() == (False,)
        assert health.database_node(wrapper) == "node 2"
    finally:
        wrapper.close()


def test_a_node_label_is_a_place_in_the_list_never_an_address():
    url = "amqp://g:g@10.0.0.1:5672//;amqp://g:g@10.0.0.2//;amqp://g:g@10.0.0.3:5673//"
    assert stores.amqp_node(url, "10.0.0.2", 5672) == "node 2"
    assert stores.amqp_node(url, "10.0.0.3", 5673) == "node 3"
    assert stores.amqp_node(url, "10.0.0.9", 5672) == "node ?"
    assert stores.redis_node("redis://10.0.0.1:6379/0", master="picnic") == "node 1"
