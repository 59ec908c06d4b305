"""What the runtime benches share: a throwaway PostgreSQL database of their own, copies of a
row made in SQL, real server processes on free ports, percentiles and the machine line."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def setup_django(database: str) -> str:
    """Point Django at `database` (created fresh and migrated) and return its URL."""
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if not base.startswith("postgres"):
        sys.exit("these benches need PostgreSQL: DATABASE_URL=postgres://…")
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")
    os.environ["DATABASE_URL"] = base
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment

    settings.DATABASES["default"]["TEST"]["NAME"] = database
    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    return base.rsplit("/", 1)[0] + "/" + database


def drop_database() -> None:
    from django.db import connection

    connection.creation.destroy_test_db(connection.settings_dict["NAME"], verbosity=0)


def copy_rows(table: str, template_pk, count: int, *, fresh: dict[str, str]) -> None:
    """`count` copies of one row in one INSERT … SELECT: `fresh` gives the SQL expression of
    each column that must differ per copy (ids, unique hashes); the rest is copied."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s", [table]
        )
        columns = [row[0] for row in cursor.fetchall()]
        chosen = ", ".join(fresh.get(c, f't."{c}"') for c in columns)
        names = ", ".join(f'"{c}"' for c in columns)
        cursor.execute(
            f'INSERT INTO "{table}" ({names}) SELECT {chosen} '
            f'FROM "{table}" t, generate_series(1, %s) AS n WHERE t."id" = %s',
            [count, template_pk],
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "w")  # noqa: SIM115 - closed by stop()
    proc = subprocess.Popen(
        args, cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT
    )
    proc.out = out
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    proc.out.close()


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {load[0]:.2f} at start "
        "(the machine is shared with other work)"
    )
