"""Start the production process types as real processes (tests, the soak test): gunicorn with
uvicorn workers, Celery workers per queue kind, the beat. Each runs in its own session with
its output in a log file, so a test can read it and kill exactly what it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from dev.testing import celery_worker_argv

ROOT = Path(__file__).resolve().parent.parent


class Process:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path):
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    def start(self) -> Process:
        log = open(self.log_path, "a")  # noqa: SIM115 - the child keeps its own copy
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group (a Celery worker's pool children too)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 30) -> None:
        if not self.alive():
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()


def gunicorn(env: dict[str, str], log_path: Path, *, bind: str, workers: int = 1) -> Process:
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        str(ROOT / "picnic" / "gunicorn_conf.py"),
        "picnic.asgi:application",
    ]
    env = {**env, "WEB_BIND": bind, "WEB_CONCURRENCY": str(workers)}
    return Process("web", argv, env, log_path)


def celery_worker(
    env: dict[str, str], log_path: Path, *, queues: list[str], concurrency: int = 2
) -> Process:
    return Process("worker", celery_worker_argv(queues, concurrency=concurrency), env, log_path)


def celery_beat(env: dict[str, str], log_path: Path, *, schedule_path: Path) -> Process:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "picnic",
        "beat",
        "-s",
        str(schedule_path),
        "-l",
        "info",
    ]
    return Process("beat", argv, env, log_path)


def http(
    method: str,
    url: str,
    *,
    body: dict | None = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request; any status comes back (no exception for 4xx/5xx)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def answers(url: str) -> bool:
    """True once `url` answers 200 (used to wait for a server to come up)."""
    try:
        return http("GET", url, timeout=5)[0] == 200
    except OSError:
        return False
