"""Health: `/healthz` (liveness: the process answers, no I/O) and `/readyz` (readiness: every
dependency this deployment needs answers within HEALTH_CHECK_TIMEOUT_SECONDS).

One table of checks (`CHECKS`), each a function that returns on success (None, or a detail to
report, such as the broker's queue backlog) and raises on failure;
`run_checks()` runs them all at once in a small thread pool, so a hanging dependency costs one
timeout, not the sum. The views and `manage.py health` share it.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import kombu.exceptions
import redis
from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import Error as DatabaseError
from django.db import connections
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from core import stores
from core.api import failure_reason

logger = logging.getLogger(__name__)


class CheckFailed(Exception):
    """A dependency answered, but not what readiness needs (the message is client-safe)."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    latency_ms: int
    error: str | None
    # What the check saw besides ok (the broker: messages waiting per queue kind), or None.
    detail: dict | None = None
    # The chain a node or bundler check is about (its name, what people read), else None.
    chain: str | None = None
    # False for a check whose failure is reported without making the instance unready.
    required: bool = True
    # A store's primary: {"node": "node 2", "since": ISO time, "changes": n} (core/stores.py).
    primary: dict | None = None


# --- The checks: each raises the errors its dependency raises; `_run_one` names them ---------


def check_database(timeout: float) -> None:
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            if cursor.fetchone() != (1,):
                raise CheckFailed("SELECT 1 did not answer 1")
        stores.observe("database", database_node(connection))
    finally:
        # This runs in a pool thread: its connection must not outlive the thread.
        connection.close()


def database_node(connection) -> str:
    """Which of DATABASE_URL's hosts the connection reached (SQLite: its one file)."""
    if connection.vendor != "postgresql":
        return "node 1"
    return stores.database_node(connection.settings_dict, connection.connection.info)


def check_broker(timeout: float) -> dict | None:
    url = settings.CELERY_BROKER_URL
    if url.startswith("filesystem://"):
        # The embedded broker is two folders: ready when the queue folder takes a file.
        options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
        _writable(Path(options["data_folder_in"]))
        stores.observe("broker", "node 1")
        return
    with current_app.connection_for_read(
        url,
        connect_timeout=timeout,
        transport_options={"socket_timeout": timeout, "socket_connect_timeout": timeout},
    ) as conn:
        # Each node of an `amqp://h1;amqp://h2` list once, at once: a node down is no outage.
        conn.ensure_connection(
            max_retries=len(conn.alt) - 1 if conn.alt else 0, interval_start=0, timeout=timeout
        )
        if url.startswith("amqp"):
            stores.observe("broker", stores.amqp_node(url, conn.hostname, conn.port or 5672))
    if stores.is_redis(url):
        stores.observe("broker", redis_node(url, timeout))
        return {"queues": queue_backlog(timeout)}
    return None


def redis_node(url: str, timeout: float) -> str:
    return stores.redis_node(url, master=settings.REDIS_SENTINEL_MASTER, timeout=timeout)


def redis_client(url: str, timeout: float):
    return stores.redis_client(
        url,
        master=settings.REDIS_SENTINEL_MASTER,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )


def queue_backlog(timeout: float) -> dict[str, int]:
    """Messages waiting in each queue kind's Redis list (not yet taken by a worker): a queue
    whose workers are down grows here. One round trip of LLENs, whatever the backlog."""
    # kombu keeps a queue's messages of priority p > 0 in a list of its own: "<queue>\x06\x16<p>".
    steps = ("", *(f"\x06\x16{p}" for p in (3, 6, 9)))
    client = redis_client(settings.CELERY_BROKER_URL, timeout)
    try:
        pipe = client.pipeline(transaction=False)
        for queue in settings.CELERY_QUEUES_BY_KIND.values():
            for step in steps:
                pipe.llen(queue + step)
        lengths = iter(pipe.execute())
    finally:
        client.close()
    return {kind: sum(next(lengths) for _ in steps) for kind in settings.CELERY_QUEUES_BY_KIND}


def check_cache(timeout: float) -> None:
    key = f"picnic:health:{uuid.uuid4().hex}"
    cache.set(key, "ok", timeout=max(int(timeout) + 1, 5))
    value = cache.get(key)
    cache.delete(key)
    if value != "ok":
        raise CheckFailed("a value set in the cache could not be read back")
    url = settings.CACHE_URL
    stores.observe("cache", redis_node(url, timeout) if stores.is_redis(url) else "node 1")


def check_events(timeout: float) -> None:
    url = settings.EVENTS_URL
    if stores.is_redis(url):
        client = redis_client(url, timeout)
        try:
            if not client.ping():
                raise CheckFailed("PING was not answered with PONG")
        finally:
            client.close()
        stores.observe("events", redis_node(url, timeout))
        return
    # The local channel is socket files in EVENTS_DIR: ready when listeners can bind there.
    path = Path(settings.EVENTS_DIR)
    path.mkdir(parents=True, exist_ok=True)
    _writable(path)
    stores.observe("events", "node 1")


def _writable(path: Path) -> None:
    with tempfile.NamedTemporaryFile(dir=path, prefix=".health-"):
        pass


STORES = ("database", "broker", "cache", "events")


def observe_primaries(*, timeout: float) -> set[str]:
    """Run the stores' checks (in threads of their own, as /readyz does: each closes its
    database connection), which note each one's primary (`stores.current()`): the stores
    that answered."""
    plan = [PlannedCheck(name, CHECKS[name], EXPECTED_ERRORS[name]) for name in STORES]
    with ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix="primaries") as pool:
        results = list(pool.map(lambda planned: _run_one(planned, timeout), plan))
    return {result.name for result in results if result.ok}


# What each check's dependency raises when it is down, slow or answering garbage: reported
# by its reason. Anything else a check raises is a bug, reported as an unexpected error.
EXPECTED_ERRORS: dict[str, tuple[type[BaseException], ...]] = {
    "database": (DatabaseError,),
    "broker": (kombu.exceptions.KombuError, redis.RedisError, OSError),
    "cache": (redis.RedisError, OSError),
    "events": (redis.RedisError, OSError),
}

CHECKS: dict[str, Callable[[float], dict | None]] = {
    "database": check_database,
    "broker": check_broker,
    "cache": check_cache,
    "events": check_events,
}


@dataclass(frozen=True)
class PlannedCheck:
    """One check of a run: what `register_check_source` sources give, read at each run."""

    name: str
    check: Callable[[float], dict | None]
    errors: tuple[type[BaseException], ...] = ()
    chain: str | None = None
    required: bool = True


# Sources of checks that depend on what is configured when the checks run (one per chain of
# the table): each returns its PlannedChecks.
CHECK_SOURCES: list[Callable[[], list[PlannedCheck]]] = []


def register_check_source(source: Callable[[], list[PlannedCheck]]) -> None:
    """Add checks computed at each run (an app's, from its AppConfig.ready()): the actions
    app checks every chain of the table, which settings (and tests) may change."""
    if source not in CHECK_SOURCES:
        CHECK_SOURCES.append(source)


def _plan() -> list[PlannedCheck]:
    planned = [
        PlannedCheck(name, check, EXPECTED_ERRORS.get(name, ())) for name, check in CHECKS.items()
    ]
    for source in CHECK_SOURCES:
        planned += source()
    return planned


def register_check(
    name: str,
    check: Callable[[float], dict | None],
    *,
    errors: tuple[type[BaseException], ...] = (),
) -> None:
    """Add an app's dependency to readiness, from its AppConfig.ready(): `check(timeout)`
    returns None (or a detail to report) and raises on failure; `errors` are what the
    dependency raises when it is down. The core knows no app: apps register here."""
    CHECKS[name] = check
    EXPECTED_ERRORS[name] = tuple(errors)


def _reason(exc: BaseException) -> str:
    # The bundler client wraps the transport error; its kind ("timed out") is the reason.
    cause = exc.__cause__
    if cause is not None and not isinstance(exc, CheckFailed):
        reason = failure_reason(cause)
        if reason in {"timed out", "connection refused", "connection failed"}:
            return reason
    text = str(exc).lower()
    if "timeout" in text or "timed out" in text:
        return "timed out"
    if "refused" in text:
        return "connection refused"
    if isinstance(exc, DatabaseError):
        # A driver's message names the host, port, database and user: the log keeps it.
        return f"database error ({type(exc).__name__})"
    return failure_reason(exc)


def _run_one(planned: PlannedCheck, timeout: float) -> CheckResult:
    name = planned.name
    started = time.monotonic()
    detail = None
    try:
        detail = planned.check(timeout)
    except (CheckFailed, *planned.errors) as exc:
        error = _reason(exc)
        logger.warning("readiness check %s failed: %s", name, exc)
    except Exception as exc:  # noqa: BLE001 - a health endpoint must answer: a bug is a failure
        logger.exception("readiness check %s raised an unexpected error", name)
        error = f"unexpected error: {type(exc).__name__}"
    else:
        error = None
    latency = round((time.monotonic() - started) * 1000)
    seen = stores.current().get(name) if error is None else None
    primary = None
    if seen is not None:
        since = datetime.fromtimestamp(seen.since, tz=UTC).isoformat(timespec="seconds")
        primary = {"node": seen.node, "since": since, "changes": seen.changes}
    return CheckResult(
        name, error is None, latency, error, detail, planned.chain, planned.required, primary
    )


def run_checks(*, timeout: float | None = None) -> list[CheckResult]:
    """Every check at once; one that has not answered after `timeout` is reported timed out
    (its thread is left to end on its own client timeout)."""
    timeout = settings.HEALTH_CHECK_TIMEOUT_SECONDS if timeout is None else timeout
    plan = _plan()
    pool = ThreadPoolExecutor(max_workers=len(plan), thread_name_prefix="readyz")
    started = time.monotonic()
    futures = {p: pool.submit(_run_one, p, timeout) for p in plan}
    try:
        wait(futures.values(), timeout=timeout + 0.25)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    results = []
    for planned, future in futures.items():
        if future.done():
            results.append(future.result())
        else:
            logger.warning("readiness check %s did not answer within %ss", planned.name, timeout)
            latency = round((time.monotonic() - started) * 1000)
            results.append(
                CheckResult(
                    planned.name,
                    False,
                    latency,
                    "timed out",
                    chain=planned.chain,
                    required=planned.required,
                )
            )
    return results


def is_ready(results: list[CheckResult]) -> bool:
    """Every required check answered (a chain other than the card's that is down is
    reported, not fatal: see actions/health.py)."""
    return all(result.ok for result in results if result.required)


# --- Views: no authentication, no session, no CSRF (load balancers call them) -------------


@csrf_exempt
@never_cache
@require_GET
def healthz(request):
    """Liveness: this process can answer a request. No database, no cache, no network."""
    return JsonResponse({"status": "ok"})


@csrf_exempt
@never_cache
@require_GET
def readyz(request):
    """Readiness: 200 when every dependency answers, 503 otherwise, each check with its
    latency and a reason a client may read."""
    results = run_checks()
    ready = is_ready(results)
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": [asdict(result) for result in results],
    }
    return JsonResponse(body, status=200 if ready else 503)
