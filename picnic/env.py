"""Typed readers for settings from environment variables.

Every reader has a safe local default and fails at start-up, naming the variable, when a value
is set but cannot be used: a typo in production must not silently fall back to a default.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return None if value is None or value.strip() == "" else value.strip()


def env_str(name: str, default: str) -> str:
    return _raw(name) or default


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use true/false, 1/0, yes/no)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        result = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and result < minimum:
        raise ImproperlyConfigured(f"{name}={result} must be at least {minimum}")
    return result


def env_float(
    name: str, default: float, *, minimum: float = 0.0, allow_minimum: bool = False
) -> float:
    value = _raw(name)
    if value is None:
        return default
    try:
        result = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not a number") from None
    if result < minimum or (result == minimum and not allow_minimum):
        bound = "at least" if allow_minimum else "greater than"
        raise ImproperlyConfigured(f"{name}={result} must be {bound} {minimum}")
    return result


def env_choice(name: str, default: str, choices: Iterable[str]) -> str:
    allowed = tuple(choices)
    value = _raw(name) or default
    if value not in allowed:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


def env_url(name: str, default: str, *, schemes: Iterable[str]) -> str:
    allowed = tuple(schemes)
    value = _raw(name) or default
    parts = urlsplit(value)
    if parts.scheme not in allowed:
        raise ImproperlyConfigured(
            f"{name}={value!r} must be a URL with scheme {' or '.join(allowed)}"
        )
    if parts.scheme in {"http", "https", "redis", "rediss", "amqp", "postgres", "postgresql"}:
        if not parts.hostname:
            raise ImproperlyConfigured(f"{name}={value!r} has no host")
        try:
            parts.port  # noqa: B018 - raises ValueError on a non-numeric port
        except ValueError:
            raise ImproperlyConfigured(f"{name}={value!r} has an invalid port") from None
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]
