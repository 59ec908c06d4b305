"""What the runtime benches share: a fresh throwaway database of their own (PostgreSQL, or SQLite
where a script allows it), the bench user with its agent application and token, the settings
and static files of a production-like server, copies of a row made in SQL, real server
processes on free ports, percentiles and the machine line.

`BENCH_TEMPLATE_DATABASE` (a PostgreSQL database's name, or an SQLite file) makes each fresh
database a copy of that already-migrated one instead of migrating from scratch: the smoke test
(`core/tests/test_bench_smoke.py`) runs every script that way in seconds.

`BENCH_LOCAL_WORLD` (the ports of a running local world, see `running_world`) makes the chain
benches use that world instead of starting and stopping nodes and bundlers of their own: the
smoke test passes its session's world."""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
TEMPLATE = "BENCH_TEMPLATE_DATABASE"
LOCAL_WORLD = "BENCH_LOCAL_WORLD"
POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")


def setup_django(database: str, *, sqlite: bool = False) -> str:
    """Point Django at a fresh database named `database` (made and migrated, or copied from
    $BENCH_TEMPLATE_DATABASE) and return its URL. PostgreSQL from DATABASE_URL (default: the
    local server); with `sqlite` a script that allows it runs on SQLite (var/<database>.sqlite3)
    when DATABASE_URL is not PostgreSQL. Never the database a test run may be using."""
    base = os.environ.get("DATABASE_URL", "" if sqlite else POSTGRES)
    if not base.startswith("postgres") and not sqlite:
        sys.exit("this bench needs PostgreSQL: DATABASE_URL=postgres://…")
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_test_environment

    test = settings.DATABASES["default"]["TEST"]
    template = os.environ.get(TEMPLATE) or None
    if connection.vendor == "sqlite":
        test["NAME"] = str(Path(settings.VAR_DIR) / f"{database}.sqlite3")
        url = f"sqlite:///{test['NAME']}"
        if template:
            shutil.copyfile(template, test["NAME"])  # kept below: migrate has nothing to do
    else:
        test["NAME"], test["TEMPLATE"] = database, template
        url = base.rsplit("/", 1)[0] + "/" + database
    setup_test_environment()
    keep = bool(template) and connection.vendor == "sqlite"
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=keep)
    return url


def running_world():
    """The running local world $BENCH_LOCAL_WORLD names, as JSON
    `{"card": [rpc_port, bundler_port], "l2": [rpc_port, bundler_port]}` (what `world_ports`
    writes), or None: then the bench starts a world of its own. A running world is used as it
    is (never stopped here); the benches make fresh accounts, so earlier state does not matter."""
    import json

    from chain.stack import LocalWorld  # the chain stack only for the benches that use it

    spec = os.environ.get(LOCAL_WORLD)
    if not spec:
        return None
    ports = json.loads(spec)
    return LocalWorld.on_ports(
        card_rpc_port=ports["card"][0],
        card_bundler_port=ports["card"][1],
        l2_rpc_port=ports["l2"][0],
        l2_bundler_port=ports["l2"][1],
    )


def world_ports(world) -> str:
    """$BENCH_LOCAL_WORLD for the running `world` (a chain.stack.LocalWorld)."""
    import json

    return json.dumps(
        {
            "card": [world.card.rpc_port, world.card.bundler_port],
            "l2": [world.l2.rpc_port, world.l2.bundler_port],
        }
    )


def create_database(url: str) -> None:
    """The PostgreSQL database of `url`, made when missing (from $BENCH_TEMPLATE_DATABASE when
    set), for the benches that keep theirs between runs and migrate it themselves."""
    import psycopg

    server, name = url.rsplit("/", 1)
    template = os.environ.get(TEMPLATE)
    with psycopg.connect(server + "/postgres", autocommit=True) as root:
        if not root.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            suffix = f' TEMPLATE "{template}"' if template else ""
            root.execute(f'CREATE DATABASE "{name}"{suffix}')


def server_env(work: Path) -> dict[str, str]:
    """The environment of a production-like server process: DEBUG off, a fresh secret key,
    static files collected under `work` (DEBUG off serves the manifest's hashed names, so the
    pages fail without them: see `collect_static`)."""
    return {
        "DJANGO_DEBUG": "false",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "SPEND_PERMISSION_KEYS": Fernet.generate_key().decode(),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
        "DJANGO_STATIC_ROOT": str(work / "static"),
    }


def migrate_and_collect(code: Path, env: dict[str, str]) -> None:
    """`migrate` and `collectstatic` of the checkout `code`, in its own process with `env`."""
    for command in (["migrate", "-v0"], ["collectstatic", "--noinput", "-v0"]):
        subprocess.run(
            [PYTHON, "manage.py", *command], cwd=code, env={**os.environ, **env}, check=True
        )


def serve_wsgi(code: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """gunicorn on `code`'s picnic.wsgi (2 sync workers, as the admin and console benches
    measure), on a free port, once /healthz answers: (the process, its base URL). Stop it with
    `stop_server`."""
    import requests

    port = free_port()
    server = subprocess.Popen(
        [str(Path(PYTHON).parent / "gunicorn"), "picnic.wsgi", "--workers=2",
         "--worker-class=sync", f"--bind=127.0.0.1:{port}", "--timeout=120",
         "--log-level=warning"],
        cwd=code,
        env={**os.environ, **env},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            requests.get(base + "/healthz", timeout=10)
            return server, base
        except requests.RequestException:
            if server.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {server.returncode}") from None
            time.sleep(0.2)
    stop_server(server)
    raise RuntimeError("gunicorn did not answer /healthz within a minute")


def stop_server(server: subprocess.Popen) -> None:
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)


def bench_agent(*, scope: str | None = None, username: str = "bench"):
    """The bench's user, its agent (an OAuth application) and, given `scope`, a bearer token of
    that scope valid for a day: (user, application, token or None)."""
    from datetime import timedelta

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.utils import timezone
    from oauth2_provider.models import AccessToken, Application

    user = get_user_model().objects.create(username=username)
    application = Application.objects.create(
        name="bench agent",
        user=user,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="http://127.0.0.1/cb",
    )
    token = None
    if scope is not None:
        token = AccessToken.objects.create(
            user=user,
            application=application,
            token=secrets.token_urlsafe(32),
            scope=scope,
            expires=timezone.now() + timedelta(days=1),
            # The API's audience, as a token asked for without `resource` gets: the API refuses
            # unbound tokens (RFC 8707).
            resource=[settings.PUBLIC_BASE_URL],
        )
    return user, application, token


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
