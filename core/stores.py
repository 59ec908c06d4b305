"""Where each shared store's primary is, and the Redis clients that follow it.

A Redis URL names one node (`redis://host:port/db`) or, under Sentinel, the sentinels that
know the primary: `sentinel://[:password@]host:port/db;sentinel://host:port;…` (kombu's form,
so CELERY_BROKER_URL takes the same value), the master's name in REDIS_SENTINEL_MASTER. A
client built by `redis_client()` asks the sentinels for the primary on each new connection,
so a failover costs a reconnect, not a restart. PostgreSQL's primary is found by libpq itself
(`DATABASE_URL=postgres://…@h1:p1,h2:p2/db?target_session_attrs=read-write`).

`observe()` keeps which node is primary for each store (what /readyz and /metrics report), and
since when this process has seen it there.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.sentinel
import redis.sentinel

SENTINEL_SCHEME = "sentinel"
REDIS_SCHEMES = ("redis", "rediss", SENTINEL_SCHEME)


class StoreUrlError(ValueError):
    """A store URL that cannot be used (the message names what is wrong, not the password)."""


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    db: int
    password: str | None


def is_redis(url: str) -> bool:
    return url.split("://", 1)[0] in REDIS_SCHEMES


def is_sentinel(url: str) -> bool:
    return url.startswith(f"{SENTINEL_SCHEME}://")


def parse_sentinel(url: str) -> SentinelUrl:
    """The sentinels, the database number and the password of a `sentinel://…;…` URL: every
    part a sentinel with a host and a port, one database number for all."""
    sentinels, dbs, password = [], set(), None
    for part in url.split(";"):
        parts = urlsplit(part.strip())
        if parts.scheme != SENTINEL_SCHEME:
            raise StoreUrlError(f"every part must be a {SENTINEL_SCHEME}:// URL")
        try:
            port = parts.port
        except ValueError:
            raise StoreUrlError("a sentinel has an invalid port") from None
        if not parts.hostname or port is None:
            raise StoreUrlError("every sentinel needs a host and a port")
        sentinels.append((parts.hostname, port))
        path = parts.path.strip("/")
        if path:
            if not path.isdigit():
                raise StoreUrlError(f"the database must be a number, not {path!r}")
            dbs.add(int(path))
        if parts.password:
            password = unquote(parts.password)
    if len(dbs) > 1:
        raise StoreUrlError("the sentinels' parts name different databases")
    return SentinelUrl(tuple(sentinels), dbs.pop() if dbs else 0, password)


def _sentinel(url: SentinelUrl, timeout: float | None, asynchronous: bool):
    cls = redis.asyncio.sentinel.Sentinel if asynchronous else redis.sentinel.Sentinel
    options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    return cls(list(url.sentinels), sentinel_kwargs=options)


class FollowingConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """An asyncio connection to the primary that asks the sentinels where it is on every
    reconnect. redis-py's (8.1) asks only when the pool hands a connection out: a command
    retried on the same connection (a pipeline's retries reconnect inside
    `send_packed_command`) went back to the address it had, so after a failover every retry
    knocked on the dead primary until the retries ran out (the MCP servers' event store then
    failed; core/tests/test_stores.py). The sync client finds the new primary as it is."""

    async def _connect(self):
        if self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        return await super()._connect()


def redis_client(url: str, *, master: str, asynchronous: bool = False, **options):
    """A client of the Redis `url` names: the one node, or the primary the sentinels know
    (found again on each new connection)."""
    if not is_sentinel(url):
        cls = redis.asyncio.Redis if asynchronous else redis.Redis
        return cls.from_url(url, **options)
    parsed = parse_sentinel(url)
    timeout = options.get("socket_connect_timeout") or options.get("socket_timeout") or 2.0
    sentinel = _sentinel(parsed, timeout, asynchronous)
    cls = redis.asyncio.Redis if asynchronous else redis.Redis
    if asynchronous:
        options = {"connection_class": FollowingConnection, **options}
    return sentinel.master_for(
        master, redis_class=cls, db=parsed.db, password=parsed.password, **options
    )


class SentinelCachePool:
    """Django's RedisCache `pool_class` for a `sentinel://` LOCATION: the connection pool of
    the primary the sentinels name (OPTIONS: `master`, and what redis-py's pool takes)."""

    @classmethod
    def from_url(cls, url: str, *, master: str, **options):
        parsed = parse_sentinel(url)
        sentinel = _sentinel(parsed, options.get("socket_connect_timeout") or 2.0, False)
        return redis.sentinel.SentinelConnectionPool(
            master, sentinel, db=parsed.db, password=parsed.password, **options
        )


# --- Which node is primary ---------------------------------------------------------------


def amqp_nodes(url: str) -> list[str]:
    """`host:port` of each node of an AMQP broker URL (`amqp://h1;amqp://h2;…`)."""
    nodes = []
    for part in url.split(";"):
        parts = urlsplit(part.strip())
        nodes.append(f"{parts.hostname}:{parts.port or 5672}")
    return nodes


@dataclass
class Seen:
    node: str
    since: float  # wall clock: when this process first saw `node` as the primary
    changes: int = 0  # how often this process saw the primary move


_seen: dict[str, Seen] = {}
_seen_lock = threading.Lock()


def observe(store: str, node: str) -> Seen:
    """Record that `node` is `store`'s primary now; what this process knows of it."""
    with _seen_lock:
        seen = _seen.get(store)
        if seen is None:
            seen = _seen[store] = Seen(node, time.time())
        elif seen.node != node:
            seen.node, seen.since, seen.changes = node, time.time(), seen.changes + 1
        return Seen(seen.node, seen.since, seen.changes)


def current() -> dict[str, Seen]:
    """What this process last saw of each store's primary."""
    with _seen_lock:
        return {store: Seen(s.node, s.since, s.changes) for store, s in _seen.items()}


# --- Node labels: a position in the configured list, never an address ---------------------
# /readyz is unauthenticated and names no host or port: a primary is reported as "node N", the
# Nth host of DATABASE_URL or CELERY_BROKER_URL, or, under Sentinel, the Nth of the group's
# nodes (the primary and its replicas, as the sentinels list them) sorted by address.


def position(node: str, nodes: list[str]) -> str:
    return f"node {nodes.index(node) + 1}" if node in nodes else "node ?"


def database_node(settings_dict: dict, info) -> str:
    """The label of the PostgreSQL host libpq connected to (`info`: psycopg's ConnectionInfo),
    among DATABASE_URL's hosts."""
    hosts = str(settings_dict.get("HOST") or "").split(",")
    ports = str(settings_dict.get("PORT") or "").split(",")
    ports += [ports[-1]] * (len(hosts) - len(ports))  # libpq: one port applies to every host
    nodes = [f"{h}:{p or 5432}" for h, p in zip(hosts, ports, strict=False)]
    return position(f"{info.host}:{info.port}", nodes)


def redis_node(url: str, *, master: str, timeout: float = 2.0) -> str:
    """The label of the Redis primary of `url` (one node: node 1)."""
    if not is_sentinel(url):
        return "node 1"
    sentinel = _sentinel(parse_sentinel(url), timeout, False)
    try:
        host, port = sentinel.discover_master(master)
        group = {f"{host}:{port}"}
        for client in sentinel.sentinels:
            try:
                replicas = client.sentinel_slaves(master)
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            group |= {f"{r['ip']}:{r['port']}" for r in replicas}
            break
    finally:
        for client in sentinel.sentinels:
            client.close()
    return position(f"{host}:{port}", sorted(group))


def amqp_node(url: str, hostname: str, port: int) -> str:
    """The label of the AMQP node a connection reached, among the URL's nodes."""
    return position(f"{hostname}:{port}", amqp_nodes(url))
