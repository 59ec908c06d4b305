"""`make run` (manage.py run_local) starts quietly: one line per step, no warning a newcomer
cannot act on, and the URLs and demo logins as the last lines once everything answers; the
processes' logs go to var/log/run_local.log; Ctrl-C stops everything it started.

It runs the real command (chain stack, local providers, worker with beat, uvicorn, the MCP
server) on free ports with a var/ directory of its own."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chain.stack import free_port

pytestmark = pytest.mark.chain
ROOT = Path(__file__).resolve().parents[2]
# What the shared environment may set for other tests; run_local must use its own defaults.
INHERITED = (
    "CELERY_BROKER_URL",
    "EVENTS_URL",
    "CACHE_URL",
    "LOG_FORMAT",
    "METRICS_TOKEN",
    "PROMETHEUS_MULTIPROC_DIR",
    "CELERY_QUEUE_PREFIX",
)


class Terminal:
    """run_local's terminal: its lines as they come (a thread reads them, so a read never
    waits on a select() that Python's own buffer has already drained)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def until(self, marker: str, timeout: float) -> list[str]:
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            seen.append(line)
            if marker in line:
                return seen
        pytest.fail(f"no {marker!r} from run_local:\n" + "\n".join(seen))

    def rest(self) -> list[str]:
        self.thread.join(timeout=60)
        rest = []
        while (line := self.lines.get_nowait()) is not None:
            rest.append(line)
        return rest


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_make_run_ends_with_the_logins_and_prints_no_warning(tmp_path):
    web, mcp = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    env.update(
        DJANGO_DEBUG="true",
        PICNIC_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=f"sqlite:///{tmp_path / 'picnic.sqlite3'}",
        CHAIN_RPC_URL=f"http://127.0.0.1:{free_port()}",
        BUNDLER_RPC_URL=f"http://127.0.0.1:{free_port()}",
        X_API_BASE_URL=f"http://127.0.0.1:{free_port()}",
        OPERATIONS_BACKEND_URL=f"http://127.0.0.1:{free_port()}",
        SWAP_QUOTE_URL=f"http://127.0.0.1:{free_port()}",
        GNOSIS_PAY_URL=f"http://127.0.0.1:{free_port()}",
        PRICE_API_URL=f"http://127.0.0.1:{free_port()}",
        MONERIUM_URL=f"http://127.0.0.1:{free_port()}",
        AVENIA_URL=f"http://127.0.0.1:{free_port()}",
        MCP_HTTP_PORT=str(mcp),
        MCP_API_URL=f"http://127.0.0.1:{web}",
        WEBAUTHN_ORIGIN=f"http://localhost:{web}",
        PYTHONUNBUFFERED="1",
    )
    process = subprocess.Popen(
        [sys.executable, "manage.py", "run_local", "--addr", f"127.0.0.1:{web}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    terminal = Terminal(process)
    try:
        started = terminal.until("bearer token", timeout=300)
        assert _listening(web) and _listening(mcp)
    finally:
        # What Ctrl-C sends to the foreground group; run_local stops its children itself.
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=60)
    rest = terminal.rest()
    output = started + rest

    # The logins are the last lines of the start-up: after them, only the shutdown line.
    assert started[-4].startswith(f"Picnic is up on http://127.0.0.1:{web}/")
    assert started[-3] == (
        f"  staff login   http://127.0.0.1:{web}/admin/ and /staff/  "
        "user staff password picnic-staff-demo"
    )
    assert started[-2] == (
        f"  end user      http://localhost:{web}/passkeys/  user alice password alice-demo-password"
    )
    assert started[-1].startswith("  bearer token  ")
    assert f"the MCP server http://127.0.0.1:{mcp}/mcp and the API" in started[-1]
    assert rest == ["stopped web server, MCP server, worker, local providers and chain stack"]
    assert process.returncode == 0

    # Nothing a newcomer cannot act on, neither on the terminal nor in the log.
    # (The one line said when running as root names the warning it explains.)
    terminal = "\n".join(line for line in output if not line.startswith("running as root:"))
    assert "warning" not in terminal.lower(), terminal
    log = (tmp_path / "var" / "log" / "run_local.log").read_text()
    assert "demo data ready" in log and " ready." in log  # seed_demo's output; the worker's
    for noise in ("No hostname was supplied", "lifespan", "superuser privileges"):
        assert noise not in log, noise
    if os.geteuid() == 0:
        assert any(line.startswith("running as root:") for line in output)

    # Ctrl-C stopped what it started.
    assert not _listening(web) and not _listening(mcp)
