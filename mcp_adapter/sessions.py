"""MCP sessions shared by every instance (2025-11-25 handshake revisions): no sticky sessions.

A session opened on one instance is served by any other. What the instances share:
- the session record: id, negotiated protocol version, the client's `initialize` params
  (capabilities, clientInfo), the credential that opened it (the SDK's `AuthorizationContext`),
  created / last seen; it ends MCP_SESSION_IDLE_SECONDS after its last use on any instance, or
  at once everywhere on DELETE;
- its resource subscriptions (`resources/subscribe`): the sessions following each URI;
- its resumable streams' events (mcp_adapter/event_store.py) and, for each published event,
  which notification it became in each session's standalone (GET) stream, so that every
  instance hearing the event writes it there once.

2026-07-28 requests carry everything in their `_meta` envelope: the SDK serves each on its own
(no session) and a `subscriptions/listen` stream is fed on whichever instance holds it, since
every instance hears every event (core.events).

Two backends: Redis (`EVENTS_URL=redis://…`, keys under `<DEPLOYMENT_PREFIX>:mcp:`) and process
memory (the embedded default, one instance).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis.asyncio
from django.conf import settings
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from core import stores

# The `_meta` key of a `notifications/resources/updated` naming the event it reports: the key
# under which every instance writes that notification into a session's stream once.
EVENT_META_KEY = "picnic/event"

# How a command to the shared store rides out a Redis restart (AOF replayed, seconds on a loaded
# machine): its connection errors are retried for about 14 s (0.05 s doubling to 0.5 s, 30
# times), not redis-py's ~2.6 s. A request in flight through the restart then completes, where
# a failed event-store write inside the SDK's POST handling answers 500 and ends the session's
# transport on that instance, which a client takes for a lost session.
STORE_RETRY = Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=30)


def store_client(url: str) -> redis.asyncio.Redis:
    """A client of the Redis holding the MCP sessions and stream events."""
    return stores.redis_client(
        url, master=settings.REDIS_SENTINEL_MASTER, asynchronous=True, retry=STORE_RETRY
    )


# Whether the session still exists, and its last use, in one round trip.
_TOUCH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
redis.call('HSET', KEYS[1], 'last_seen', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
return redis.call('HGET', KEYS[1], 'record')
"""
# The sessions following a URI that still exist (the others are forgotten on the way).
_FOLLOWERS = """
local alive = {}
for _, sid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', ARGV[1] .. sid) == 1 then
    table.insert(alive, sid)
  else
    redis.call('SREM', KEYS[1], sid)
  end
end
return alive
"""


@dataclass
class SessionRecord:
    session_id: str
    protocol_version: str
    client_params: dict[str, Any]
    owner: dict[str, Any] | None
    created: float

    def dumps(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def loads(cls, data: str | bytes) -> SessionRecord:
        return cls(**json.loads(data))


class MemorySessions:
    """One process's sessions (the embedded default)."""

    def __init__(self, ttl_seconds: int):
        self.ttl_seconds = ttl_seconds
        self._records: dict[str, tuple[SessionRecord, float]] = {}
        self._followers: dict[str, set[str]] = {}

    async def save(self, record: SessionRecord) -> None:
        self._records[record.session_id] = (record, time.time())

    def _live(self, session_id: str) -> SessionRecord | None:
        found = self._records.get(session_id)
        if found is not None and time.time() - found[1] > self.ttl_seconds:
            self._forget(session_id)
            return None
        return found[0] if found else None

    async def touch(self, session_id: str) -> SessionRecord | None:
        record = self._live(session_id)
        if record is not None:
            self._records[session_id] = (record, time.time())
        return record

    async def alive(self, session_ids: list[str]) -> set[str]:
        return {s for s in session_ids if await self.touch(s) is not None}

    async def delete(self, session_id: str) -> None:
        self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        self._records.pop(session_id, None)
        for sessions in self._followers.values():
            sessions.discard(session_id)

    async def follow(self, session_id: str, uri: str) -> None:
        self._followers.setdefault(uri, set()).add(session_id)

    async def unfollow(self, session_id: str, uri: str) -> None:
        self._followers.get(uri, set()).discard(session_id)

    async def followers(self, uri: str) -> list[str]:
        return [s for s in list(self._followers.get(uri, ())) if self._live(s) is not None]


class RedisSessions:
    """Sessions in Redis (production), under `<DEPLOYMENT_PREFIX>:mcp:`:
    `session:<id>` a hash (`record` JSON, `last_seen`) expiring MCP_SESSION_IDLE_SECONDS after
    its last use; `session:<id>:follows` the URIs it follows (same expiry); `follows:<uri>` the
    sessions following a URI (ended sessions are dropped from it when it is read)."""

    def __init__(self, url: str, ttl_seconds: int, prefix: str | None = None):
        self.client = store_client(url)
        self.prefix = f"{settings.DEPLOYMENT_PREFIX}:mcp:" if prefix is None else prefix
        self.ttl_seconds = ttl_seconds
        self._touch = self.client.register_script(_TOUCH)
        self._followers = self.client.register_script(_FOLLOWERS)

    def _session(self, session_id: str) -> str:
        return f"{self.prefix}session:{session_id}"

    def _follows(self, uri: str) -> str:
        return f"{self.prefix}follows:{uri}"

    async def save(self, record: SessionRecord) -> None:
        key = self._session(record.session_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"record": record.dumps(), "last_seen": time.time()})
            pipe.expire(key, self.ttl_seconds)
            await pipe.execute()

    async def touch(self, session_id: str) -> SessionRecord | None:
        key = self._session(session_id)
        found = await self._touch(
            keys=[key, key + ":follows"], args=[self.ttl_seconds, time.time()]
        )
        return SessionRecord.loads(found) if found else None

    async def alive(self, session_ids: list[str]) -> set[str]:
        """Which of these sessions still exist; their expiry starts again (an instance holds
        them, with a request or a stream in flight or idle for less than the timeout)."""
        now = time.time()
        async with self.client.pipeline(transaction=False) as pipe:
            for session_id in session_ids:
                key = self._session(session_id)
                await self._touch(
                    keys=[key, key + ":follows"], args=[self.ttl_seconds, now], client=pipe
                )
            found = await pipe.execute()
        return {s for s, record in zip(session_ids, found, strict=True) if record}

    async def delete(self, session_id: str) -> None:
        key = self._session(session_id)
        uris = await self.client.smembers(key + ":follows")
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(key, key + ":follows")
            for uri in uris:
                pipe.srem(self._follows(uri.decode()), session_id)
            await pipe.execute()

    async def follow(self, session_id: str, uri: str) -> None:
        key = self._session(session_id)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.sadd(self._follows(uri), session_id)
            pipe.sadd(key + ":follows", uri)
            pipe.expire(key + ":follows", self.ttl_seconds)
            await pipe.execute()

    async def unfollow(self, session_id: str, uri: str) -> None:
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.srem(self._follows(uri), session_id)
            pipe.srem(self._session(session_id) + ":follows", uri)
            await pipe.execute()

    async def followers(self, uri: str) -> list[str]:
        found = await self._followers(keys=[self._follows(uri)], args=[self.prefix + "session:"])
        return [s.decode() for s in found]


Sessions = MemorySessions | RedisSessions


def sessions_from_settings() -> Sessions:
    ttl = settings.MCP_SESSION_IDLE_SECONDS
    if stores.is_redis(settings.EVENTS_URL):
        return RedisSessions(settings.EVENTS_URL, ttl)
    return MemorySessions(ttl)
