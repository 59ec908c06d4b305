"""Typed readers for settings from environment variables.

Every reader has a safe local default and fails at start-up, naming the variable, when a value
is set but cannot be used: a typo in production must not silently fall back to a default.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core import stores


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    return None if value is None or value.strip() == "" else value.strip()


def env_is_set(name: str) -> bool:
    return _raw(name) is not None


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
    if not math.isfinite(result):  # nan passes every comparison below; inf bounds nothing
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number")
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


# Schemes whose value may list several nodes: the broker's (`amqp://h1;amqp://h2`, kombu tries
# them in turn) and Sentinel's (`sentinel://s1:26379;sentinel://s2:26379`, core/stores.py).
NODE_LIST_SCHEMES = {"amqp", "sentinel"}
POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql"}


def env_url(name: str, default: str, *, schemes: Iterable[str]) -> str:
    allowed = tuple(schemes)
    value = _raw(name) or default
    parts = urlsplit(value)
    if parts.scheme not in allowed:
        raise ImproperlyConfigured(
            f"{name}={value!r} must be a URL with scheme {' or '.join(allowed)}"
        )
    if parts.scheme in NODE_LIST_SCHEMES:
        for node in value.split(";"):
            if urlsplit(node.strip()).scheme != parts.scheme:
                raise ImproperlyConfigured(f"{name}: every node must be a {parts.scheme}:// URL")
            _check_host(name, node.strip())
        if parts.scheme == "sentinel":
            try:
                stores.parse_sentinel(value)
            except stores.StoreUrlError as exc:
                raise ImproperlyConfigured(f"{name}: {exc}") from None
    elif parts.scheme in POSTGRES_SCHEMES:
        # libpq's multi-host form: postgres://user@h1:5432,h2:5432/db (database_settings).
        userinfo = parts.netloc.rpartition("@")[0]
        for node in parts.netloc.rpartition("@")[2].split(","):
            _check_host(name, f"{parts.scheme}://{userinfo}@{node}")
    elif parts.scheme in {"http", "https", "redis", "rediss"}:
        _check_host(name, value)
    return value


def _check_host(name: str, value: str) -> None:
    parts = urlsplit(value)
    if not parts.hostname:
        raise ImproperlyConfigured(f"{name}={value!r} has no host")
    try:
        parts.port  # noqa: B018 - raises ValueError on a non-numeric port
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} has an invalid port") from None


def database_settings(name: str, url: str, **options: Any) -> dict:
    """dj-database-url's DATABASES entry for `url`, which may name several PostgreSQL hosts
    (`postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write`, which dj-database-url
    does not parse): HOST and PORT become libpq's comma-separated lists, and libpq connects to
    the first host that takes writes. Several hosts without `target_session_attrs=read-write`
    (or `primary`) could land on a standby: refused."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if parts.scheme not in POSTGRES_SCHEMES or "," not in hostlist:
        return dj_database_url.parse(url, **options)
    nodes = [urlsplit(f"//{node}") for node in hostlist.split(",")]
    first = parts._replace(netloc=f"{userinfo}{at}{hostlist.split(',')[0]}").geturl()
    config = dj_database_url.parse(first, **options)
    config["HOST"] = ",".join(node.hostname for node in nodes)
    config["PORT"] = ",".join(str(node.port or 5432) for node in nodes)
    if config.get("OPTIONS", {}).get("target_session_attrs") not in {"read-write", "primary"}:
        raise ImproperlyConfigured(
            f"{name} names several hosts: add ?target_session_attrs=read-write so that "
            "connections go to the primary"
        )
    return config


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated addresses or CIDR networks (`10.0.0.5, 10.1.0.0/16`); empty by default.
    A network with host bits set (`10.0.0.5/24`, likely a typo) or a `*` stops start-up."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not an IP address or network (like 10.0.0.0/8)"
            ) from None
    return tuple(networks)


def trusted_proxies() -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """TRUSTED_PROXY_IPS: the proxies whose X-Forwarded-* gunicorn and Django believe (none by
    default). The old FORWARDED_ALLOW_IPS stops start-up rather than being silently ignored."""
    if env_is_set("FORWARDED_ALLOW_IPS"):
        raise ImproperlyConfigured("FORWARDED_ALLOW_IPS is now TRUSTED_PROXY_IPS (docs/deploy.md)")
    return env_networks("TRUSTED_PROXY_IPS")


def env_json(name: str, default: Any) -> Any:
    """A JSON value (a table such as CHAINS); the default when unset."""
    value = _raw(name)
    if value is None:
        return default
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None


def machine_secret(path: Path) -> str:
    """A random secret made once (mode 0600) and shared by every process of this checkout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        # Written whole under a private name, then linked into place: a racing process
        # either wins the link or reads the winner's complete file.
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    value = path.read_text().strip()
    if len(value) < 50:
        raise ImproperlyConfigured(f"{path} does not hold a usable secret key (delete it)")
    return value
