"""Prometheus metrics (`prometheus-client`): what the processes count, what a scrape reads from
the database and the broker, and the `/metrics` endpoint.

Counters and histograms are incremented where the work happens (transitions, provider calls,
reconciliation, DM outcomes, MCP tool calls). With PROMETHEUS_MULTIPROC_DIR set (production:
gunicorn workers, Celery worker processes, the MCP server) every process writes its own files
there and one scrape of the web app sums them all (`MultiProcessCollector`); without it (tests,
`make run`) the ordinary in-process registry is used. Gauges of the current state (oldest
non-terminal item, stuck counts, credits held, queue backlog) are not counted anywhere: a
collector computes them at scrape time from PostgreSQL and the broker, in a bounded number of
queries that does not grow with the number of rows.

`prometheus_client` reads PROMETHEUS_MULTIPROC_DIR when it is first imported, so the variable
must be in the process environment before it starts (the prod helper sets it).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from core import stores

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Provider calls: from a fast local answer to the longest provider timeout configured.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

TRANSITIONS = Counter(
    "picnic_lifecycle_transitions",
    "Committed status changes (and creations, into the initial status) per lifecycle and "
    "target status.",
    ["lifecycle", "status"],
)
RECONCILE_OUTCOMES = Counter(
    "picnic_action_reconcile",
    "Outcomes of reconciling one in-flight action (batch, task or staff re-send).",
    ["outcome"],
)
PROVIDER_LATENCY = Histogram(
    "picnic_provider_request_duration_seconds",
    "Time from sending a provider request to having its answer (or giving up on it).",
    ["provider"],
    buckets=LATENCY_BUCKETS,
)
PROVIDER_ERRORS = Counter(
    "picnic_provider_errors",
    "Provider calls that did not get a usable answer, by provider and kind "
    "(not_sent, timeout, connection_lost, connection_error, http_4xx, http_5xx, rpc_error, "
    "invalid_response).",
    ["provider", "kind"],
)
DM_OUTCOMES = Counter(
    "picnic_dm_outcomes",
    "DM deliveries that reached sent, failed or unknown (committed).",
    ["outcome"],
)
MCP_TOOL_CALLS = Counter(
    "picnic_mcp_tool_calls",
    "MCP tool calls by tool and outcome (ok, error: a tool error result, raised: an exception).",
    ["tool", "outcome"],
)
MCP_TOOL_LATENCY = Histogram(
    "picnic_mcp_tool_call_duration_seconds",
    "MCP tool call duration, from the call to its result, by tool and outcome.",
    ["tool", "outcome"],
    buckets=LATENCY_BUCKETS,
)


# --- Counting, called from the code that does the work -----------------------------------------


def count_transition(lifecycle_name: str, status: str) -> None:
    """Count a status change once the transaction that wrote it commits (a rolled-back
    transition never happened). Outside a transaction on_commit runs at once."""

    transaction.on_commit(lambda: TRANSITIONS.labels(lifecycle_name, status).inc())


def count_dm_outcome(outcome: str) -> None:
    transaction.on_commit(lambda: DM_OUTCOMES.labels(outcome).inc())


def count_reconcile(outcome: str) -> None:
    RECONCILE_OUTCOMES.labels(str(outcome)).inc()


def count_provider_error(provider: str, kind: str) -> None:
    PROVIDER_ERRORS.labels(provider, kind).inc()


@contextmanager
def provider_timer(provider: str) -> Iterator[None]:
    """Observe the duration of one provider request, whatever its outcome."""
    start = time.perf_counter()
    try:
        yield
    finally:
        PROVIDER_LATENCY.labels(provider).observe(time.perf_counter() - start)


def observe_provider_request(provider: str, seconds: float) -> None:
    """Observe one provider request timed by its caller (requests sent side by side)."""
    PROVIDER_LATENCY.labels(provider).observe(seconds)


def record_mcp_tool_call(tool: str, outcome: str, seconds: float) -> None:
    MCP_TOOL_CALLS.labels(tool, outcome).inc()
    MCP_TOOL_LATENCY.labels(tool, outcome).observe(seconds)


# --- Chain RPC and the bundler: web3 providers, instrumented from the Django side ------------


def web3_error_kind(exc: BaseException) -> str:
    if isinstance(exc, requests.ConnectTimeout):
        return "not_sent"
    if isinstance(exc, requests.Timeout | TimeoutError):
        return "timeout"
    if isinstance(exc, requests.ConnectionError | ConnectionError):
        # requests does not tell a refused connection from one lost after sending.
        return "connection_error"
    if isinstance(exc, requests.HTTPError):
        status = getattr(exc.response, "status_code", None) or 500
        return "http_4xx" if status < 500 else "http_5xx"
    return "invalid_response"


def instrument_web3(w3: Any, *, provider: str) -> Any:
    """Time every JSON-RPC request (single and batch) of `w3` and count its errors, labelled
    `provider`. Wraps the provider's `make_request` on this instance rather than adding a
    middleware, because `evm.bundler.BundlerClient.call` calls `provider.make_request`
    directly (no middleware runs there); `evm/` stays free of Django and metrics. Returns w3."""
    target = w3.provider

    def wrap(inner):
        def make_request(*args, **kwargs):
            with provider_timer(provider):
                try:
                    response = inner(*args, **kwargs)
                except Exception as exc:
                    count_provider_error(provider, web3_error_kind(exc))
                    raise
            answers = response if isinstance(response, list) else [response]
            if any(isinstance(a, dict) and a.get("error") is not None for a in answers):
                count_provider_error(provider, "rpc_error")
            return response

        return make_request

    target.make_request = wrap(target.make_request)
    if hasattr(target, "make_batch_request"):
        target.make_batch_request = wrap(target.make_batch_request)
    return w3


# --- Scrape-time gauges: the database and the broker --------------------------------------------


def _collector_up(results: dict[str, bool]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "picnic_metrics_collector_up",
        "1 if the scrape-time collector could read its source (database, broker), else 0.",
        labels=["collector"],
    )
    for name, ok in results.items():
        family.add_metric([name], 1.0 if ok else 0.0)
    return family


# The database gauges, read at scrape time: each registered function returns its families.
# The core's lifecycle registry and the apps add theirs from AppConfig.ready(); this module
# imports neither.
DATABASE_GAUGES: list[Callable[[], list[GaugeMetricFamily]]] = []


def register_database_gauges(read: Callable[[], list[GaugeMetricFamily]]) -> None:
    if read not in DATABASE_GAUGES:
        DATABASE_GAUGES.append(read)


def _database_families() -> list[GaugeMetricFamily]:
    return [family for read in DATABASE_GAUGES for family in read()]


def monitored_queues() -> list[str]:
    """The Celery queues whose backlog is reported: METRICS_CELERY_QUEUES when set, else the
    queue of each kind of work (CELERY_QUEUES_BY_KIND, prefix included)."""

    if settings.METRICS_CELERY_QUEUES:
        return list(settings.METRICS_CELERY_QUEUES)
    return sorted(settings.CELERY_QUEUES_BY_KIND.values())


# kombu's Redis transport keeps messages sent with a priority in one more list per step.
_KOMBU_PRIORITY_SEP = "\x06\x16"
_KOMBU_PRIORITY_STEPS = (3, 6, 9)
_redis_clients: dict[str, Any] = {}


def _redis_backlog(url: str, queues: list[str]) -> dict[str, int]:
    client = _redis_clients.get(url)
    if client is None:
        client = stores.redis_client(
            url,
            master=settings.REDIS_SENTINEL_MASTER,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
        )
        _redis_clients[url] = client
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.llen(queue)
        for step in _KOMBU_PRIORITY_STEPS:
            pipe.llen(f"{queue}{_KOMBU_PRIORITY_SEP}{step}")
    counts = pipe.execute()
    per_queue = 1 + len(_KOMBU_PRIORITY_STEPS)
    return {q: sum(counts[i * per_queue : (i + 1) * per_queue]) for i, q in enumerate(queues)}


def _filesystem_backlog(folder: str, queues: list[str]) -> dict[str, int]:
    # kombu's filesystem transport names a message file "<ts>_<uuid>.<queue>.msg".
    counts = dict.fromkeys(queues, 0)
    for entry in os.scandir(folder):
        name = entry.name
        if name.endswith(".msg"):
            queue = name[: -len(".msg")].split(".", 1)[-1]
            if queue in counts:
                counts[queue] += 1
    return counts


def _queue_families() -> list[GaugeMetricFamily]:
    """Messages waiting in each monitored Celery queue of the broker (one Redis round trip;
    on the filesystem broker, one directory listing). A queue whose workers are down grows.
    Other brokers (amqp, memory) are not read: no family, and the collector reports 0."""

    url = settings.CELERY_BROKER_URL
    queues = monitored_queues()
    if stores.is_redis(url):
        counts = _redis_backlog(url, queues)
    elif url.startswith("filesystem://"):
        counts = _filesystem_backlog(
            settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"], queues
        )
    else:
        raise LookupError(f"queue lengths are not read from {url.split(':', 1)[0]} brokers")
    backlog = GaugeMetricFamily(
        "picnic_celery_queue_backlog_messages",
        "Messages waiting in the broker per Celery queue (not yet taken by a worker).",
        labels=["queue"],
    )
    for queue, count in counts.items():
        backlog.add_metric([queue], count)
    return [backlog]


def _primary_families() -> list[GaugeMetricFamily]:
    """Which node is primary for each store (a store that does not answer now is left out),
    and when this process saw it become so: the readiness checks find them (core/health.py)."""
    # Here, not at the top: the readiness checks import the API layer (DRF), and a process that
    # only counts (a worker's provider client) must not need it or Django's settings.
    from core import health

    answering = health.observe_primaries(timeout=2.0)
    primary = GaugeMetricFamily(
        "picnic_store_primary",
        "1 for the node that is the store's primary now (node N: the Nth host configured, "
        "or under Sentinel the Nth of the group's nodes by address).",
        labels=["store", "node"],
    )
    since = GaugeMetricFamily(
        "picnic_store_primary_since_timestamp_seconds",
        "When this process first saw the store's current primary (Unix time): the last change.",
        labels=["store"],
    )
    changes = GaugeMetricFamily(
        "picnic_store_primary_changes",
        "How often this process saw the store's primary move to another node.",
        labels=["store"],
    )
    for store, seen in stores.current().items():
        if store in answering:
            primary.add_metric([store, seen.node], 1.0)
            since.add_metric([store], seen.since)
            changes.add_metric([store], seen.changes)
    return [primary, since, changes]


class StateCollector(Collector):
    """The gauges read at scrape time. A source that cannot be read leaves its families out
    and says so in `picnic_metrics_collector_up` (the rest of the scrape still answers)."""

    SOURCES = (
        ("database", _database_families),
        ("celery_queues", _queue_families),
        ("store_primaries", _primary_families),
    )

    def collect(self):
        up = {}
        for name, read in self.SOURCES:
            try:
                families = read()
            except Exception:
                logger.exception("metrics: %s gauges could not be read", name)
                up[name] = False
                continue
            up[name] = True
            yield from families
        yield _collector_up(up)


# --- Exposition ---------------------------------------------------------------------------------


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or None


def render() -> bytes:
    """One scrape: the counters of every process (or of this one), then the gauges read now."""
    if multiprocess_dir():
        counted = CollectorRegistry()
        multiprocess.MultiProcessCollector(counted)
    else:
        counted = REGISTRY
    current = CollectorRegistry(auto_describe=False)
    current.register(StateCollector())
    return generate_latest(counted) + generate_latest(current)


@require_GET
def metrics_view(request):
    """`/metrics` for Prometheus, behind a bearer token (METRICS_TOKEN). Without a configured
    token the endpoint does not exist (404), so nothing is exposed by default."""

    expected = settings.METRICS_TOKEN
    if not expected:
        raise Http404
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), expected.encode()
    ):
        response = HttpResponse("A valid bearer token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    # The classic text format (what generate_latest writes), which every Prometheus reads.
    response = HttpResponse(render(), content_type=CONTENT_TYPE_PLAIN_0_0_4)
    response["Cache-Control"] = "no-store"
    return response


# --- Multiprocess housekeeping --------------------------------------------------------------------


def mark_process_dead(pid: int) -> None:
    """A process that wrote metrics exited: drop its live-gauge files (counters and histograms
    stay, so totals do not go backwards). Gunicorn's `child_exit` hook and Celery's
    `worker_process_shutdown` call this."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)


def gunicorn_child_exit(server, worker) -> None:
    """Gunicorn's `child_exit` hook (gunicorn.conf.py: `child_exit = gunicorn_child_exit`)."""
    mark_process_dead(worker.pid)


def clear_multiprocess_dir() -> None:
    """Empty PROMETHEUS_MULTIPROC_DIR (creating it): `make prod` calls this before starting
    the processes, so files of a previous run (and of reused pids) are not summed in."""
    directory = multiprocess_dir()
    if not directory:
        return
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for entry in path.glob("*.db"):
        entry.unlink(missing_ok=True)
