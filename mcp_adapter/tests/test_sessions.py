"""The shared session store (mcp_adapter/sessions.py) on real Redis: records expire unless used,
an instance's sweep keeps alive what it holds and learns what ended, a DELETE takes the
subscriptions with it, and the followers of a URI are only sessions that still exist."""

from __future__ import annotations

import time
import uuid

import anyio
import pytest
import redis
from django.conf import settings

from mcp_adapter.sessions import MemorySessions, RedisSessions, SessionRecord

URI = "picnic://action/a1"


def _record() -> SessionRecord:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
    owner = {"client_id": "c", "issuer": None, "subject": "1"}
    return SessionRecord(uuid.uuid4().hex, "2025-11-25", params, owner, time.time())


async def _lifecycle(store):
    kept, deleted, lapsed = _record(), _record(), _record()
    for record in (kept, deleted, lapsed):
        await store.save(record)
        await store.follow(record.session_id, URI)
    touched = await store.touch(kept.session_id)
    await store.delete(deleted.session_id)
    return kept, deleted, lapsed, touched


@pytest.fixture
def redis_sessions():
    url = settings.CELERY_BROKER_URL  # the test run's own Redis db
    if not url.startswith("redis"):
        pytest.skip("needs Redis (CELERY_BROKER_URL=redis://…)")
    prefix = f"test-{uuid.uuid4().hex[:8]}:mcp:"
    yield RedisSessions(url, ttl_seconds=60, prefix=prefix)
    client = redis.Redis.from_url(url)
    for key in client.scan_iter(prefix + "*"):
        client.delete(key)


def test_redis_sessions_end_on_delete_or_expiry_and_take_their_follows(redis_sessions):
    store = redis_sessions
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)

    async def body():
        kept, deleted, lapsed, touched = await _lifecycle(store)
        client.delete(store.prefix + f"session:{lapsed.session_id}")  # what expiry does
        followers = await store.followers(URI)
        alive = await store.alive([kept.session_id, deleted.session_id, lapsed.session_id])
        return kept, deleted, lapsed, touched, followers, alive

    kept, deleted, lapsed, touched, followers, alive = anyio.run(body)
    assert touched == kept  # the record as written: version, params, owner
    assert followers == [kept.session_id] and alive == {kept.session_id}
    key = store.prefix + f"session:{kept.session_id}"
    assert 0 < client.ttl(key) <= 60 and 0 < client.ttl(key + ":follows") <= 60
    assert client.hget(key, "last_seen")
    # The ended sessions left nothing behind but the followers of URI (read once, pruned).
    assert not client.exists(store.prefix + f"session:{deleted.session_id}:follows")
    assert client.smembers(store.prefix + f"follows:{URI}") == {kept.session_id.encode()}


def test_memory_sessions_expire_after_the_idle_time():
    store = MemorySessions(ttl_seconds=60)

    async def body():
        kept, deleted, lapsed, touched = await _lifecycle(store)
        store._records[lapsed.session_id] = (lapsed, time.time() - 61)  # idle past the timeout
        return (
            kept,
            touched,
            await store.followers(URI),
            await store.alive([kept.session_id, deleted.session_id, lapsed.session_id]),
        )

    kept, touched, followers, alive = anyio.run(body)
    assert touched == kept and followers == [kept.session_id] and alive == {kept.session_id}
