"""Resumable streams on the 2025-11-25 streamable-HTTP transport: the SDK's `EventStore`.

With a store the SDK sends a priming event (an id, empty data and `retry`) first on every SSE
stream, gives each message an event id, and a client that lost the stream reconnects with
`Last-Event-ID` and gets what it missed. The SDK shares one store between all sessions and
names a stream by the JSON-RPC request id, which clients choose (every session has an id 1),
so the store here is only reached through `for_session`: stream keys and event ids carry the
session id, and a `Last-Event-ID` from another session finds nothing (the known cross-session
replay of a shared store; FastMCP scopes its store per session the same way, PrefectHQ/fastmcp
#4402).

Two backends, bounded both: Redis streams (`EVENTS_URL=redis://…`, production; keys under
`<DEPLOYMENT_PREFIX>:mcp:events:`, so deployments sharing a Redis keep apart; each stream
keeps its last MCP_EVENT_STORE_MAX_EVENTS events and expires MCP_EVENT_STORE_TTL_SECONDS after
its last event) and process memory (the embedded default; the same per-stream cap, and at most
MAX_MEMORY_STREAMS streams, the oldest forgotten first).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
import redis
import redis.asyncio
from django.conf import settings
from mcp.server.streamable_http import GET_STREAM_KEY, EventCallback, EventMessage, EventStore

from core import stores
from mcp_adapter.sessions import EVENT_META_KEY, store_client

logger = logging.getLogger(__name__)

MAX_MEMORY_STREAMS = 10_000
RESUME_POLL_SECONDS = 0.2
INTERRUPTED = (
    "The MCP server handling this request stopped before it answered; send the request again "
    "(a write with the same idempotency key is not done twice)"
)
_PRIMING = ""  # stored for the priming event, never replayed
# Append an event unless the one it reports (`once`) is in the stream already: then its id.
_APPEND_ONCE = """
local seen = redis.call('GET', KEYS[2])
if seen then return seen end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[3], '*', 'stream', ARGV[1], 'message', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[2], id, 'EX', ARGV[4])
return id
"""


def redis_prefix() -> str:
    """This deployment's keys in Redis."""
    return f"{settings.DEPLOYMENT_PREFIX}:mcp:events:"


def _stream_key(session_id: str, stream_id: Any) -> str:
    # JSON keeps 1 and "1" apart; the digest keeps a client's long ids out of event ids.
    digest = hashlib.sha256(json.dumps(stream_id).encode()).hexdigest()[:16]
    return f"{session_id}.{digest}"


def _split(event_id: str) -> tuple[str, str] | None:
    """(stream key, position) of an event id, or None for anything we did not mint."""
    key, dot, position = event_id.rpartition(".")
    if not dot or "." not in key or not position:
        return None
    return key, position


class MemoryEvents:
    """Events in process memory (the embedded default)."""

    def __init__(self, max_events: int, max_streams: int = MAX_MEMORY_STREAMS):
        self.max_events = max_events
        self.max_streams = max_streams
        self._streams: OrderedDict[str, tuple[str, deque[tuple[int, str]]]] = OrderedDict()
        self._counter = itertools.count(1)

    async def append(self, key: str, stream_id: str, payload: str, once: str | None = None) -> str:
        # `once` needs no bookkeeping here: one process, so one writer per event.
        entry = self._streams.get(key)
        if entry is None:
            entry = self._streams[key] = (stream_id, deque(maxlen=self.max_events))
            while len(self._streams) > self.max_streams:
                self._streams.popitem(last=False)
        self._streams.move_to_end(key)
        position = next(self._counter)
        entry[1].append((position, payload))
        return str(position)

    async def after(self, key: str, position: str) -> tuple[str, list[tuple[str, str]]] | None:
        entry = self._streams.get(key)
        if entry is None or not position.isdigit():
            return None
        after = int(position)
        return entry[0], [(str(p), payload) for p, payload in entry[1] if p > after]


class RedisEvents:
    """Events in Redis streams, one per MCP stream (production)."""

    def __init__(self, url: str, max_events: int, ttl_seconds: int, prefix: str | None = None):
        self.client = store_client(url)  # rides out a Redis restart (sessions.py)
        self.prefix = redis_prefix() if prefix is None else prefix
        self.max_events = max_events
        self.ttl_seconds = ttl_seconds
        self._append_once = self.client.register_script(_APPEND_ONCE)

    async def append(self, key: str, stream_id: str, payload: str, once: str | None = None) -> str:
        """The new event's position; with `once` (what it reports, e.g. a published event), the
        position of the event already stored for it, if any: each MCP instance that hears a
        published event writes its notification, and the stream keeps one."""
        if once is not None:
            found = await self._append_once(
                keys=[self.prefix + key, f"{self.prefix}{key}:once:{once}"],
                args=[stream_id, payload, self.max_events, self.ttl_seconds],
            )
            return found.decode()
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.xadd(
                self.prefix + key,
                {"stream": stream_id, "message": payload},
                maxlen=self.max_events,
                approximate=False,
            )
            pipe.expire(self.prefix + key, self.ttl_seconds)
            entry_id, _ = await pipe.execute()
        return entry_id.decode()

    async def after(self, key: str, position: str) -> tuple[str, list[tuple[str, str]]] | None:
        try:
            entries = await self.client.xrange(self.prefix + key, min=f"({position}")
        except redis.ResponseError:  # not a stream entry id: not one of ours
            return None
        if not entries:
            # Either nothing came after it, or the stream expired: tell them apart.
            last = await self.client.xrevrange(self.prefix + key, count=1)
            if not last:
                return None
            return last[0][1][b"stream"].decode(), []
        stream_id = entries[0][1][b"stream"].decode()
        return stream_id, [(i.decode(), f[b"message"].decode()) for i, f in entries]


class SessionEventStore(EventStore):
    """One session's view of the store: the SDK's `EventStore` for one transport.

    A request's stream resumed on an instance that is not handling the request (the one that
    had it died, or the balancer sent the reconnection elsewhere) would wait here for an answer
    only that other instance can give: the SDK forwards only what this process handles, so the
    client would wait forever (the SSE pings keep its read timeout from firing). Here its
    answer is looked for in the store, where the instance handling it writes it, for
    MCP_RESUME_WAIT_SECONDS; then the client is told the request was interrupted (INTERRUPTED,
    code -32000: send it again; every write tool takes an idempotency key, so it is not done
    twice)."""

    def __init__(
        self,
        backend: MemoryEvents | RedisEvents,
        session_id: str,
        handling: Callable[[Any], bool],
    ) -> None:
        self.backend = backend
        self.session_id = session_id
        self.handling = handling  # whether this instance is handling that request now

    async def store_event(self, stream_id: Any, message: types.JSONRPCMessage | None) -> str:
        key = _stream_key(self.session_id, stream_id)
        payload = (
            _PRIMING
            if message is None
            else message.model_dump_json(by_alias=True, exclude_unset=True)
        )
        try:
            position = await self.backend.append(
                key, json.dumps(stream_id), payload, _once(message)
            )
        except redis.RedisError:
            # The store is away beyond the client's retries. Raising here would end the SDK's
            # message router for this session (it logs and stops): every later answer of the
            # session would wait for ever. The message goes out live without an id instead;
            # only a resumption past it finds nothing.
            logger.warning("MCP event not stored (the store is unreachable): sent without an id")
            return ""
        return f"{key}.{position}"

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback):
        parts = _split(last_event_id)
        if parts is None or not parts[0].startswith(self.session_id + "."):
            return None  # malformed, or another session's: nothing to replay
        found = await self.backend.after(*parts)
        if found is None:
            return None
        stream_id, events = found
        request_id = json.loads(stream_id)
        answered = await self._send(parts[0], events, request_id, send_callback)
        if answered or request_id == GET_STREAM_KEY or self.handling(request_id):
            return None if answered else request_id
        # Nobody here will answer it: its answer can only arrive through the store.
        position = events[-1][0] if events else parts[1]
        deadline = anyio.current_time() + settings.MCP_RESUME_WAIT_SECONDS
        while anyio.current_time() < deadline:
            await anyio.sleep(RESUME_POLL_SECONDS)
            found = await self.backend.after(parts[0], position)
            if found is None:
                break  # the stream expired
            if found[1]:
                position = found[1][-1][0]
                if await self._send(parts[0], found[1], request_id, send_callback):
                    return None
        interrupted = types.JSONRPCError(
            jsonrpc="2.0",
            id=_original_id(request_id),
            error=types.ErrorData(code=types.CONNECTION_CLOSED, message=INTERRUPTED),
        )
        # Stored too: a client that loses this answer as well finds it on its next try.
        event_id = await self.store_event(request_id, interrupted)
        await send_callback(EventMessage(interrupted, event_id))
        return None  # the SDK then ends the stream: nothing more will come on it

    async def _send(
        self, key: str, events: list[tuple[str, str]], request_id: Any, send_callback
    ) -> bool:
        """Send the stored events; whether the request's answer was among them."""
        answered = False
        for position, payload in events:
            if payload != _PRIMING:
                message = types.jsonrpc_message_adapter.validate_json(payload)
                await send_callback(EventMessage(message, f"{key}.{position}"))
                answered = answered or (
                    isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
                    and str(message.id) == str(request_id)
                )
        return answered


def _original_id(stream_id: Any) -> Any:
    """The request id a request stream is named after. The SDK names it `str(id)`, so the
    type is lost: a number is taken back as one (clients number their requests)."""
    if isinstance(stream_id, str) and stream_id.isdigit() and str(int(stream_id)) == stream_id:
        return int(stream_id)
    return stream_id


def _once(message: types.JSONRPCMessage | None) -> str | None:
    """The published event a notification reports (`_meta` EVENT_META_KEY), if any."""
    params = getattr(message, "params", None)
    meta = params.get("_meta") if isinstance(params, dict) else None
    found = meta.get(EVENT_META_KEY) if isinstance(meta, dict) else None
    return found if isinstance(found, str) and found.isalnum() and len(found) <= 64 else None


class PicnicEventStore:
    """The store the session manager hands out per session (see `for_session`)."""

    def __init__(self, backend: MemoryEvents | RedisEvents):
        self.backend = backend

    def for_session(
        self, session_id: str, handling: Callable[[Any], bool] = lambda request_id: False
    ) -> SessionEventStore:
        """`handling`: whether this instance is handling a request now (the transport's)."""
        return SessionEventStore(self.backend, session_id, handling)


def event_store_from_settings() -> PicnicEventStore:
    max_events = settings.MCP_EVENT_STORE_MAX_EVENTS
    if stores.is_redis(settings.EVENTS_URL):
        return PicnicEventStore(
            RedisEvents(settings.EVENTS_URL, max_events, settings.MCP_EVENT_STORE_TTL_SECONDS)
        )
    return PicnicEventStore(MemoryEvents(max_events))
