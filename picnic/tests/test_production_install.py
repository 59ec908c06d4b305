"""A production install (docs/deploy.md, "Production install"): a virtualenv made from the
runtime lock alone (`pip install --no-deps --require-hashes -r requirements.lock`, then `pip
check`: no dev packages, no npm, no chain/ at all) starts Django with `check --deploy`, imports what the processes import,
reads the contracts from evm/artifacts.json, serves /healthz and /readyz under gunicorn and runs
a task in a Celery worker.

The venv is cached under /tmp by the lock's hash (PICNIC_PROD_VENV_DIR moves it): made once per
lock (about 50 s here, pip's cache warm), then reused."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.utils import timezone

from chain.stack import free_port
from dev import processes
from dev.testing import database_url, wait_until
from evm import artifacts
from mcp_adapter.models import McpTask, TaskKind, TaskStatus

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
# What a production install leaves out: the dev stack and its npm packages, benchmarks, docs,
# CI, the tests.
DEV_ONLY = {"chain", "dev", "bench", "docs", ".ci", "conftest.py"}


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if match:
            pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


def test_the_locks_pin_what_the_requirements_pin():
    """Edited requirements*.txt without `make lock` would install the old versions."""
    runtime, dev = _pins(ROOT / "requirements.lock"), _pins(ROOT / "requirements-dev.lock")
    for name, version in _pins(ROOT / "requirements.txt").items():
        assert runtime.get(name) == version, f"requirements.lock: {name} is not {version}"
    for name, version in _pins(ROOT / "requirements-dev.txt").items():
        assert dev.get(name) == version, f"requirements-dev.lock: {name} is not {version}"
    # The dev lock is constrained by the runtime one: the same version of every runtime package.
    assert {name: dev.get(name) for name in runtime} == runtime


def _production_venv() -> Path:
    key = hashlib.sha256(LOCK.read_bytes() + sys.version.encode()).hexdigest()[:16]
    base = Path(os.environ.get("PICNIC_PROD_VENV_DIR", "/tmp/picnic-prod-venv"))
    venv, done = base / key, base / f"{key}.done"
    base.mkdir(parents=True, exist_ok=True)
    # Built in place (its scripts name their interpreter's path), one run at a time.
    with (base / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # a build cut short
        # No pip inside (production needs none at run time): this one installs into it.
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        installed = subprocess.run(
            [
                sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                "install", "--quiet", "--no-compile", "--no-deps", "--require-hashes",
                "-r", str(LOCK),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr[-3000:]
        # --no-deps installs the lock as it is; this proves it whole and consistent.
        checked = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "check"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert checked.returncode == 0, checked.stdout[-3000:]
        done.touch()
    return venv


def _production_tree(dest: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored) less the dev-only parts and
    the tests: what a deploy ships."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, files.split("\0")):
        parts = Path(name).parts
        if parts[0] in DEV_ONLY or "tests" in parts or not (ROOT / name).is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


def _env(**extra: str) -> dict[str, str]:
    # Nothing of this process's environment but the basics: no PYTHONPATH, no dev settings.
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONNOUSERSITE": "1",
        "DJANGO_SETTINGS_MODULE": "picnic.settings",
        **extra,
    }


# Run in the production venv: Django's deploy checks, what the processes import, the contracts.
STARTUP = """
import importlib.util, json, sys
import django
from django.core.management import call_command

django.setup()
call_command("check", deploy=True, fail_level="WARNING")
from django.urls import get_resolver
get_resolver().url_patterns  # every view module the URLconf names
from picnic.celery import app
app.loader.import_default_modules()  # every tasks module, as a worker imports them
import picnic.asgi, evm.account, evm.safe, evm.word_reader, evm.spend_permission, evm.zodiac
from evm import artifacts, passkey_account, word_reader, zodiac

print(json.dumps({
    "chain": importlib.util.find_spec("chain") is not None,
    "dev": importlib.util.find_spec("dev") is not None,
    "loaded": sorted({m.split(".")[0] for m in sys.modules}),
    "file": str(artifacts.ARTIFACTS_FILE),
    "factory": {v: artifacts.passkey_factory_address(v) for v in artifacts.ENTRY_POINTS},
    "handler": artifacts.safe_address("CompatibilityFallbackHandler"),
    "entry_point_abi": len(artifacts.artifact("0.8", "EntryPoint")["abi"]),
    "reader": len(word_reader._code()),
    "delay_abi": len(zodiac.abi("Delay")),
}))
"""


# On PostgreSQL and Redis, as production: the processes share the test database and broker.
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_venv_from_the_runtime_lock_alone_serves_the_api_and_runs_the_workers(
    tmp_path, user, application, celery_test_queue
):
    venv = _production_venv()
    bin_ = venv / "bin"
    app_dir = _production_tree(tmp_path / "app")
    assert not (app_dir / "chain").exists() and (app_dir / "evm" / "artifacts.json").exists()
    installed = subprocess.run(
        [str(bin_ / "python"), "-c", "import importlib.metadata as m; "
         "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    # Runtime only: the test runner, the linter, the auditor and the browser driver are dev's.
    assert {"pytest", "ruff", "pip-audit", "playwright", "uv"}.isdisjoint(installed)

    from picnic.tests.test_settings_security import PRODUCTION

    deployment = _env(
        **PRODUCTION,
        DATABASE_URL="postgres://picnic:db-pw@127.0.0.1:5432/picnic",
        CELERY_BROKER_URL="redis://:broker-pw@127.0.0.1:6379/0",
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
        PICNIC_VAR_DIR=str(tmp_path / "var"),
    )
    started = subprocess.run(
        [str(bin_ / "python"), "-c", STARTUP],
        cwd=app_dir,
        env=deployment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    seen = json.loads(started.stdout.splitlines()[-1])
    assert not seen["chain"] and "chain" not in seen["loaded"]
    assert not seen["dev"] and "dev" not in seen["loaded"]
    assert seen["file"] == str(app_dir / "evm" / "artifacts.json")
    # The same addresses and code the dev tree computes (from the same committed file).
    assert seen["factory"] == {
        v: artifacts.passkey_factory_address(v) for v in artifacts.ENTRY_POINTS
    }
    assert seen["handler"] == artifacts.safe_address("CompatibilityFallbackHandler")
    assert seen["entry_point_abi"] == len(artifacts.artifact("0.8", "EntryPoint")["abi"]) > 0
    assert seen["reader"] == len(artifacts.build_artifact("WordReader")["bytecode"]) > 2
    assert seen["delay_abi"] > 0

    # The web and a worker from the venv, on the test database and this session's queue.
    serving = _env(
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        SPEND_PERMISSION_KEYS=Fernet.generate_key().decode(),
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_STATIC_ROOT=str(tmp_path / "static"),
        PICNIC_VAR_DIR=str(tmp_path / "var"),
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        WEB_CONCURRENCY="1",
    )
    port = free_port()
    web = subprocess.Popen(
        [str(bin_ / "gunicorn"), "-c", "picnic/gunicorn_conf.py", "picnic.asgi:application"],
        cwd=app_dir,
        env={**serving, "WEB_BIND": f"127.0.0.1:{port}"},
        stdout=(tmp_path / "web.log").open("w"),
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            str(bin_ / "celery"), "-A", "picnic", "worker", "-Q", celery_test_queue,
            "--pool=solo", "--without-heartbeat", "--without-gossip", "--without-mingle",
        ],
        cwd=app_dir,
        env=serving,
        stdout=(tmp_path / "worker.log").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        # A task past its TTL, purged by the venv's worker: the task ran on the test database.
        now = timezone.now()
        expired = McpTask.objects.create(
            user=user,
            application=application,
            tool="card_freeze",
            kind=TaskKind.ACTION,
            protocol_version="2025-11-25",
            status=TaskStatus.WORKING,
            ttl_ms=1,
            expires_at=now - timedelta(seconds=1),
        )
        from mcp_adapter.tasks import tasks_purge_expired

        tasks_purge_expired.delay()

        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: processes.answers(f"{base}/healthz"), timeout=60)
        status, headers, body = processes.http("GET", f"{base}/healthz")
        assert (status, json.loads(body), headers.get("server")) == (
            200,
            {"status": "ok"},
            "uvicorn",
        )
        _, _, body = processes.http("GET", f"{base}/readyz")
        checks = {c["name"]: c["ok"] for c in json.loads(body)["checks"]}
        assert checks["database"] and checks["broker"], body

        wait_until(lambda: not McpTask.objects.filter(pk=expired.pk).exists(), timeout=60)
    finally:
        for proc in (web, worker):
            proc.terminate()
        for proc in (web, worker):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert web.returncode == 0, (tmp_path / "web.log").read_text()[-3000:]
