"""`make test`: the whole suite as two pytest processes side by side.

One lane runs the tests that bring up servers of their own and mostly wait on them (the
`chain`, `chaos`, `soak` and `browser` markers: the local chain stack, clusters, killed
brokers, Chromium), the other everything else. On CI's two cores the first lane leaves a core mostly idle, so together they
take about as long as the longer one instead of the sum.

The lanes share nothing that a test resets: each has its own test database (the `chain` lane's
PostgreSQL name gets a `_lane2` suffix, so pytest-django makes `test_<name>_lane2`) and its own
Redis database (the next number after CELERY_BROKER_URL's); Celery queues, RabbitMQ vhosts,
ports and work folders are per session already. The second lane's output goes to
var/test-lane2.log and is printed when both are done; the exit status is the first failure's.

With arguments (`make test PYTEST_ARGS=…`) it is one plain pytest run of what they select; so
it is on the embedded SQLite default, whose test database is one file (and one writer).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
SLOW = "chain or chaos or soak or browser"
LOG = ROOT / "var" / "test-lane2.log"


def lane_env(env: dict[str, str]) -> dict[str, str]:
    """The second lane's environment: its own PostgreSQL database and Redis database."""
    env = dict(env)
    database = env.get("DATABASE_URL", "")
    if database.startswith(("postgres://", "postgresql://")):
        parts = urlsplit(database)
        env["DATABASE_URL"] = urlunsplit(parts._replace(path=parts.path + "_lane2"))
    broker = env.get("CELERY_BROKER_URL", "")
    if broker.startswith(("redis://", "rediss://")):
        parts = urlsplit(broker)
        number = parts.path.strip("/")
        following = (int(number) + 1) % 16 if number.isdigit() else 1
        env["CELERY_BROKER_URL"] = urlunsplit(parts._replace(path=f"/{following}"))
    return env


def main(argv: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest"]
    postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    if argv or not postgres:
        return subprocess.call([*pytest, *argv], cwd=ROOT)
    LOG.parent.mkdir(exist_ok=True)
    with LOG.open("w") as log:
        slow = subprocess.Popen(
            [*pytest, "-m", SLOW, "-p", "no:cacheprovider"],
            cwd=ROOT,
            env=lane_env(dict(os.environ)),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            rest = subprocess.call([*pytest, "-m", f"not ({SLOW})"], cwd=ROOT)
        finally:
            status = slow.wait()
    print(f"\n===== the {SLOW} lane (var/test-lane2.log) =====", flush=True)
    sys.stdout.write(LOG.read_text())
    return rest or status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
