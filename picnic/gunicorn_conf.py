"""gunicorn settings for the web process: `gunicorn -c picnic/gunicorn_conf.py picnic.asgi:application`.

Everything deployment-specific comes from the environment (README, "Deployment"); a bad value
stops start-up like every other setting (picnic/env.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# gunicorn imports this module before Django: picnic.env needs only ImproperlyConfigured.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picnic.env import env_int, env_str, trusted_proxies  # noqa: E402

# Pooled database connections in the web process (see DATABASE_POOL in picnic/settings.py).
os.environ.setdefault("DATABASE_POOL", "true")

# PORT is what platforms that run a Procfile (Heroku, Dokku, Scalingo…) hand the web process.
bind = [env_str("WEB_BIND", f"127.0.0.1:{env_int('PORT', 8000, minimum=1)}")]
# uvicorn workers: one event loop each, ASGI (streaming responses), on gunicorn's supervision.
worker_class = "uvicorn_worker.UvicornWorker"
workers = env_int("WEB_CONCURRENCY", 2, minimum=1)
# A worker silent this long is killed and replaced (the arbiter's heartbeat, not a request limit).
timeout = env_int("WEB_TIMEOUT_SECONDS", 30, minimum=1)
# On SIGTERM, workers finish the requests in flight for up to this long, then exit.
graceful_timeout = env_int("WEB_GRACEFUL_TIMEOUT_SECONDS", 25, minimum=1)
keepalive = env_int("WEB_KEEPALIVE_SECONDS", 5, minimum=1)
# Recycle workers now and then (a slow leak cannot grow forever); jitter so they don't all
# restart at once. 0 turns it off.
max_requests = env_int("WEB_MAX_REQUESTS", 10_000, minimum=0)
max_requests_jitter = env_int("WEB_MAX_REQUESTS_JITTER", 1_000, minimum=0)
# Only the proxies in front (TRUSTED_PROXY_IPS, none by default) may set the client's address
# and scheme with X-Forwarded-*: anyone else's header is ignored (core.proxy does the same).
forwarded_allow_ips = ",".join(str(network) for network in trusted_proxies())
# The app writes its own access line (core.middleware.TraceMiddleware: JSON, with the trace
# id); gunicorn's is off unless WEB_ACCESS_LOG names a file or "-".
accesslog = env_str("WEB_ACCESS_LOG", "") or None
errorlog = "-"
loglevel = env_str("LOG_LEVEL", "info").lower()
# Workers load the app after fork: each opens its own database and Redis connections.
preload_app = False


def post_worker_init(worker):
    """A worker has loaded the app (Django set up, middleware built): warm it up and freeze its
    start-up objects out of the collector's generations (core/gc_freeze.py,
    GC_FREEZE_AT_STARTUP). Here, not in the master: the app is loaded after fork."""
    from core.gc_freeze import freeze_after_start_up

    freeze_after_start_up(f"web worker {worker.pid}")


def child_exit(server, worker):
    """A worker process ended (normally, killed or recycled): its Prometheus multiprocess
    files are marked dead so live gauges stop counting it."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Late: the gunicorn master loads this file before Django, and needs metrics only here.
        from core.metrics import gunicorn_child_exit

        gunicorn_child_exit(server, worker)
