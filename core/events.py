"""One event channel for status transitions, published after commit by the lifecycle machinery
and listened to by the MCP adapter (which turns them into `notifications/resources/updated`).

- `EVENTS_URL=redis://…`: Redis pub/sub on channel `<DEPLOYMENT_PREFIX>:events` (production,
  CI): deployments sharing one Redis do not hear each other.
- default `local://`: Unix datagram sockets in `EVENTS_DIR` (var/events/): every listener binds
  one socket file there, a publisher sends each event to every socket it finds. It crosses
  processes on one machine (web, worker, MCP adapter) with no broker and no polling.

Listening: one subscription per process (per event loop) however many listeners there are;
`subscribe()` joins it and its reader fans every event out to the listeners' queues. The
subscription opens with the first listener and closes with the last.

Delivery is best-effort, like the notifications it feeds: a listener that was not there misses
the event, and clients re-read the resource on reconnect.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import socket
import uuid
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import redis
from django.conf import settings

from core import stores

logger = logging.getLogger(__name__)
_MAX_DATAGRAM = 4096
# What a listener may have queued and not read yet; past it, its events are dropped (logged).
LISTENER_QUEUE_SIZE = 1000


def channel() -> str:
    """This deployment's Redis channel."""
    return f"{settings.DEPLOYMENT_PREFIX}:events"


def __getattr__(name: str) -> Any:
    # `CHANNEL` was a constant; the benchmarks still import it by that name.
    if name == "CHANNEL":
        return channel()
    raise AttributeError(name)


def publish(event: dict[str, Any]) -> None:
    """Send one event to every listener (at the end of the enclosing `batch()`, if any); never
    raises (a transition is already committed)."""
    pending = _pending.get()
    if pending is not None:
        pending.append(event)
    else:
        _send([event])


# The events of the current `batch()`, or None outside one.
_pending: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "picnic_events_batch", default=None
)
# The current batch's Redis writes whose replies are not read yet (after a `flush()`).
_unread: contextvars.ContextVar[_Publisher | None] = contextvars.ContextVar(
    "picnic_events_unread", default=None
)


@contextmanager
def batch() -> Iterator[None]:
    """Publish the events of the block together when it ends, in their order: on Redis one
    round trip (a pipeline of PUBLISHes) instead of one per event. A nested batch joins the
    outer one."""
    if _pending.get() is not None:
        yield
        return
    token = _pending.set([])
    unread = _unread.set(None)
    try:
        yield
    finally:
        pending, publisher = _pending.get(), _unread.get()
        _pending.reset(token)
        _unread.reset(unread)
        if pending or publisher is not None:
            _send(pending or [], publisher=publisher)


def flush() -> None:
    """Inside a batch: publish what it holds now, before a wait that its readers should not sit
    through (a provider call); the batch goes on collecting after it. On Redis the events are
    written at once and their replies read with the batch's last ones, so the batch still
    waits on Redis once."""
    pending = _pending.get()
    if pending:
        # None when it failed: its publisher was let go, the batch's next write starts anew.
        _unread.set(_send(list(pending), publisher=_unread.get(), hold=True))
        pending.clear()


def _send(
    events: list[dict[str, Any]], *, publisher: _Publisher | None = None, hold: bool = False
) -> _Publisher | None:
    """Publish `events`; on Redis through `publisher` (the batch's earlier writes) or a new one.
    With `hold`, the replies are left to read later and the publisher is returned."""
    # On the wire each event gets an `event_id`: the MCP instances that all hear it write one
    # notification per event into a session's shared stream (mcp_adapter/sessions.py).
    data = [
        json.dumps({**event, "event_id": uuid.uuid4().hex}, separators=(",", ":")).encode()
        for event in events
    ]
    try:
        if stores.is_redis(settings.EVENTS_URL):
            publisher = publisher or _Publisher()
            try:
                if data:
                    publisher.write(channel(), data)
                if hold:
                    return publisher
            except BaseException:
                publisher.abandon()
                raise
            publisher.finish()
        else:
            for item in data:
                _publish_local(item)
    except Exception:  # noqa: BLE001 - notifications are best-effort by design
        logger.warning("could not publish events %s", events, exc_info=True)
    return None


class _Publisher:
    """PUBLISHes on one pooled connection: each write is one packed send, the replies are read
    by `finish()` (a pipeline's one round trip without its per-command bookkeeping, which cost
    more CPU than the round trip on a DM worker). A DM delivery writes its `claimed` and
    `sending` before the provider call and reads their replies after it, with its outcome's:
    one wait on Redis, not two. A connection the server dropped is reconnected and every write
    made once more, as the client's own retry would (listeners drop repeats by `event_id`)."""

    def __init__(self) -> None:
        self.pool = _redis().connection_pool
        self.conn = self.pool.get_connection()
        self.written: list[Any] = []  # the packed commands, in order
        self.replies = 0

    def write(self, name: str, data: list[bytes]) -> None:
        packed = self.conn.pack_commands([("PUBLISH", name, item) for item in data])
        self.written.append(packed)
        self.replies += len(data)
        try:
            self.conn.send_packed_command(packed)
        except (redis.ConnectionError, redis.TimeoutError):
            self._again()

    def finish(self) -> None:
        try:
            try:
                self._read()
            except (redis.ConnectionError, redis.TimeoutError):
                self._again()
                self._read()
        except BaseException:
            self.abandon()
            raise
        self.pool.release(self.conn)

    def abandon(self) -> None:
        # Replies may be left unread on it: never handed to the next publisher as it is.
        self.conn.disconnect()
        self.pool.release(self.conn)

    def _read(self) -> None:
        for _reply in range(self.replies):
            self.conn.read_response()

    def _again(self) -> None:
        self.conn.disconnect()
        for packed in self.written:
            self.conn.send_packed_command(packed)


_redis_client = None


def _redis():
    global _redis_client
    if _redis_client is None:
        _redis_client = stores.redis_client(
            settings.EVENTS_URL, master=settings.REDIS_SENTINEL_MASTER, socket_timeout=2
        )
    return _redis_client


def _events_dir() -> Path:
    path = Path(settings.EVENTS_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _publish_local(data: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for path in _events_dir().glob("*.sock"):
            try:
                sock.sendto(data, str(path))
            except (ConnectionRefusedError, FileNotFoundError):
                path.unlink(missing_ok=True)  # its listener is gone
            except BlockingIOError:
                logger.warning("event listener %s is not keeping up; event dropped", path.name)


def subscribe() -> Subscription:
    """`async with subscribe() as sub: event = await sub.receive()`; listening starts on
    entry, so nothing published after entry is missed. Every listener of a process shares its
    one subscription (`_Hub`)."""
    return _Listener()


class SubscriptionLost(ConnectionError):
    """The process's subscription broke (Redis went away): listeners end, clients reconnect."""


class Subscription:
    async def __aenter__(self) -> Subscription:
        raise NotImplementedError

    async def __aexit__(self, *exc: object) -> None:
        raise NotImplementedError

    async def receive(self) -> dict[str, Any]:
        raise NotImplementedError


class _Hub:
    """The one subscription of an event loop and its listeners' queues."""

    def __init__(self) -> None:
        self.queues: set[asyncio.Queue] = set()
        self.reader: asyncio.Task | None = None
        self.ready: asyncio.Future | None = None

    async def join(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue(maxsize=LISTENER_QUEUE_SIZE)
        self.queues.add(queue)
        if self.reader is None or self.reader.done():
            self.ready = asyncio.get_running_loop().create_future()
            self.reader = asyncio.create_task(self._read(self.ready))
        ready = self.ready
        try:
            await asyncio.shield(ready)  # subscribed: nothing published from now on is missed
        except BaseException:
            self.leave(queue)
            raise
        return queue

    def leave(self, queue: asyncio.Queue) -> None:
        self.queues.discard(queue)
        if not self.queues and self.reader is not None:
            self.reader.cancel()  # the last listener left: release the connection
            self.reader = None

    async def _read(self, ready: asyncio.Future) -> None:
        try:
            async with _backend_subscription() as subscription:
                ready.set_result(None)
                while True:
                    event = await subscription.receive()
                    for queue in list(self.queues):
                        try:
                            queue.put_nowait(event)
                        except asyncio.QueueFull:
                            logger.warning("an event listener is not keeping up; event dropped")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to every listener, which ends
            logger.warning("event subscription ended: %r", exc)
            if not ready.done():
                ready.set_exception(SubscriptionLost(str(exc)))
            for queue in list(self.queues):
                _force(queue, exc)
        finally:
            if not ready.done():
                ready.cancel()


def _force(queue: asyncio.Queue, item: Any) -> None:
    """Put `item` even into a full queue (it replaces the oldest event)."""
    while True:
        try:
            queue.put_nowait(item)
            return
        except asyncio.QueueFull:
            queue.get_nowait()


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hub] = weakref.WeakKeyDictionary()


def _hub() -> _Hub:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = _Hub()
    return hub


def listener_count() -> int:
    """Listeners on this event loop's subscription (0 outside a loop or with none)."""
    try:
        hub = _hubs.get(asyncio.get_running_loop())
    except RuntimeError:
        return 0
    return len(hub.queues) if hub else 0


class _Listener(Subscription):
    async def __aenter__(self) -> Subscription:
        self.hub = _hub()
        self.queue = await self.hub.join()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.hub.leave(self.queue)

    async def receive(self) -> dict[str, Any]:
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise SubscriptionLost(str(item)) from item
        return item


def _backend_subscription() -> Subscription:
    if stores.is_redis(settings.EVENTS_URL):
        return _RedisSubscription()
    return _LocalSubscription()


class _RedisSubscription(Subscription):
    async def __aenter__(self) -> Subscription:
        self.client = stores.redis_client(
            settings.EVENTS_URL, master=settings.REDIS_SENTINEL_MASTER, asynchronous=True
        )
        self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        await self.pubsub.subscribe(channel())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pubsub.aclose()
        await self.client.aclose()

    async def receive(self) -> dict[str, Any]:
        while True:
            message = await self.pubsub.get_message(timeout=None)
            if message and message.get("type") == "message":
                return json.loads(message["data"])


class _LocalSubscription(Subscription):
    async def __aenter__(self) -> Subscription:
        self.path = _events_dir() / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(self.path))
        self.sock.setblocking(False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)

    async def receive(self) -> dict[str, Any]:
        while True:
            await anyio.wait_readable(self.sock)
            try:
                return json.loads(self.sock.recv(_MAX_DATAGRAM))
            except BlockingIOError:
                continue
