"""Settings come from the environment; a bad value stops start-up and names the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from picnic import env

ROOT = Path(__file__).resolve().parents[2]


def _start(**overrides: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in overrides}
    environ.update(overrides, DJANGO_SETTINGS_MODULE="picnic.settings")
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); print('started')"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DATABASE_URL", "mysql://root@127.0.0.1/test"),
        ("DATABASE_URL", "postgres://:notaport/db"),
        ("CELERY_BROKER_URL", "kafka://127.0.0.1:9092"),
        ("CHAIN_RPC_URL", "127.0.0.1:8545"),
        ("BUNDLER_RPC_URL", "ftp://127.0.0.1:4337"),
        ("ENTRY_POINT_VERSION", "0.9"),
        ("BUNDLER_TIMEOUT_SECONDS", "soon"),
        ("ACTION_TTL_SECONDS", "-5"),
        ("ACCOUNT_CHANGE_EXPIRY_SECONDS", "10"),
        ("DJANGO_DEBUG", "maybe"),
        ("LOG_FORMAT", "xml"),
        ("METRICS_TOKEN", "too-short"),
    ],
)
def test_a_bad_value_fails_start_up_naming_the_variable(variable, value):
    result = _start(**{variable: value})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert variable in result.stderr.splitlines()[-1]


def test_production_without_a_secret_key_refuses_to_start():
    result = _start(DJANGO_DEBUG="false", DJANGO_SECRET_KEY="")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


@pytest.mark.parametrize(
    ("keys", "said"),
    [
        ("", "SPEND_PERMISSION_KEYS must be set when DJANGO_DEBUG is false"),
        ("not-a-fernet-key", "each key must be a Fernet key"),
    ],
)
def test_production_without_spend_permission_keys_refuses_to_start(keys, said):
    result = _start(DJANGO_DEBUG="false", DJANGO_SECRET_KEY="k" * 60, SPEND_PERMISSION_KEYS=keys)
    assert result.returncode != 0 and said in result.stderr


def test_the_defaults_start_on_embedded_components():
    result = _start(DATABASE_URL="", CELERY_BROKER_URL="")
    assert result.returncode == 0, result.stderr
    assert "started" in result.stdout


def test_env_readers(monkeypatch):
    monkeypatch.setenv("X_INT", "42")
    monkeypatch.setenv("X_BOOL", "yes")
    monkeypatch.setenv("X_LIST", "a, b,,c")
    assert env.env_int("X_INT", 1) == 42
    assert env.env_bool("X_BOOL", False) is True
    assert env.env_list("X_LIST", []) == ["a", "b", "c"]
    assert env.env_str("X_UNSET", "default") == "default"
    monkeypatch.setenv("X_INT", "4")
    with pytest.raises(ImproperlyConfigured, match="X_INT=4 must be at least 10"):
        env.env_int("X_INT", 20, minimum=10)
