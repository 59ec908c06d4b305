"""The chains this deployment serves: one table (settings.CHAINS), read by every code path.

A chain is always found from the thing in hand (an action's chain id, an asset's CAIP-19 id,
a smart account's row), never from a global "the chain". Rows are validated once, when the
settings load, so a typo in production stops the start instead of failing one request later.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

CAIP2_RE = re.compile(r"^eip155:(?P<id>[1-9][0-9]{0,17})$")
CAIP19_RE = re.compile(
    r"^eip155:(?P<id>[1-9][0-9]{0,17})/(?P<ns>[-a-z0-9]{3,8}):(?P<ref>[-.%a-zA-Z0-9]{1,128})$"
)
EXPLORER_KINDS = ("tx", "address", "block", "token")


class UnknownChain(LookupError):
    """A chain id that is not in settings.CHAINS."""

    def __init__(self, chain_id: object) -> None:
        super().__init__(f"chain {chain_id} is not configured")
        self.chain_id = chain_id


@dataclass(frozen=True)
class NativeCurrency:
    symbol: str
    name: str
    decimals: int = 18
    slip44: int = 60  # the CAIP-19 `slip44:<n>` of the native coin (60 ether, 700 xDAI)
    price_id: str = ""  # the price source's id of the coin ("ethereum", "xdai"); "" for none


@dataclass(frozen=True)
class Chain:
    id: int
    name: str  # what people read: "Gnosis", "Base"; never the id alone
    rpc_url: str
    bundler_url: str | None
    native: NativeCurrency
    # "https://gnosisscan.io/{kind}/{value}" with kind in EXPLORER_KINDS; "" for none.
    explorer_url: str = ""
    # The ENS registry (EIP-137) on this chain; "" where the chain has none.
    ens_registry: str = ""
    icon: str = "picnic/chains/generic.svg"  # a static path

    @property
    def caip2(self) -> str:
        return f"eip155:{self.id}"

    @property
    def native_asset_id(self) -> str:
        return f"{self.caip2}/slip44:{self.native.slip44}"

    def explorer(self, kind: str, value: str) -> str | None:
        """A link to `value` (a tx hash, address, block number or token) on this chain's
        explorer, or None where the table names no explorer."""
        if kind not in EXPLORER_KINDS:
            raise ValueError(f"explorer kind must be one of {EXPLORER_KINDS}, not {kind!r}")
        if not self.explorer_url:
            return None
        return self.explorer_url.format(kind=kind, value=value)


def parse_chains(rows: Iterable[Mapping[str, Any]], *, source: str = "CHAINS") -> tuple[Chain, ...]:
    """Validate the table's rows (settings load it from the environment)."""
    chains: list[Chain] = []
    for index, row in enumerate(rows):
        where = f"{source}[{index}]"
        if not isinstance(row, Mapping):
            raise ImproperlyConfigured(f"{where} must be an object")
        unknown = set(row) - {
            "id",
            "name",
            "rpc_url",
            "bundler_url",
            "native",
            "explorer_url",
            "ens_registry",
            "icon",
        }
        if unknown:
            raise ImproperlyConfigured(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        chain_id = row.get("id")
        if not isinstance(chain_id, int) or isinstance(chain_id, bool) or chain_id < 1:
            raise ImproperlyConfigured(f"{where}.id must be a positive integer")
        name = row.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 64:
            raise ImproperlyConfigured(f"{where}.name must be a non-empty string (at most 64)")
        rpc_url = _url(row.get("rpc_url"), f"{where}.rpc_url")
        bundler = row.get("bundler_url")
        bundler_url = _url(bundler, f"{where}.bundler_url") if bundler else None
        native = row.get("native") or {}
        if not isinstance(native, Mapping) or not native.get("symbol"):
            raise ImproperlyConfigured(f"{where}.native must be an object with a symbol")
        try:
            currency = NativeCurrency(
                symbol=str(native["symbol"]),
                name=str(native.get("name") or native["symbol"]),
                decimals=int(native.get("decimals", 18)),
                slip44=int(native.get("slip44", 60)),
                price_id=str(native.get("price_id") or ""),
            )
        except (TypeError, ValueError):
            raise ImproperlyConfigured(f"{where}.native has a non-integer number") from None
        explorer_url = row.get("explorer_url") or ""
        if explorer_url:
            _url(
                explorer_url.replace("{kind}", "tx").replace("{value}", "0"),
                f"{where}.explorer_url",
            )
            if "{value}" not in explorer_url:
                raise ImproperlyConfigured(f"{where}.explorer_url must contain {{value}}")
        ens_registry = row.get("ens_registry") or ""
        if ens_registry and not re.fullmatch(r"0x[0-9a-fA-F]{40}", ens_registry):
            raise ImproperlyConfigured(f"{where}.ens_registry must be a 0x address or empty")
        chains.append(
            Chain(
                id=chain_id,
                name=name.strip(),
                rpc_url=rpc_url,
                bundler_url=bundler_url,
                native=currency,
                explorer_url=explorer_url,
                ens_registry=ens_registry,
                icon=str(row.get("icon") or "picnic/chains/generic.svg"),
            )
        )
    if not chains:
        raise ImproperlyConfigured(f"{source} must name at least one chain")
    ids = [chain.id for chain in chains]
    if len(set(ids)) != len(ids):
        raise ImproperlyConfigured(f"{source} names a chain id twice")
    return tuple(chains)


def _url(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ImproperlyConfigured(f"{where} must be an http(s) URL")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(f"{where}={value!r} must be an http(s) URL with a host")
    return value


def all_chains() -> tuple[Chain, ...]:
    """Every configured chain, in the table's order (read when called: tests change it)."""
    return settings.CHAINS


def get_chain(chain_id: int | str) -> Chain:
    """The configured chain with this id; UnknownChain if there is none."""
    try:
        wanted = int(chain_id)
    except (TypeError, ValueError):
        raise UnknownChain(chain_id) from None
    for chain in settings.CHAINS:
        if chain.id == wanted:
            return chain
    raise UnknownChain(chain_id)


def chain_name(chain_id: int | str | None) -> str:
    """The human name of a chain, for any page or summary; an unconfigured id still reads
    as words ("chain 5") instead of failing a page."""
    if chain_id is None:
        return ""
    try:
        return get_chain(chain_id).name
    except UnknownChain:
        return f"chain {chain_id}"


def chain_for_asset(asset_id: str) -> Chain:
    """The chain of a CAIP-19 asset id (eip155:<id>/...); ValueError if malformed."""
    match = CAIP19_RE.match(asset_id or "")
    if not match:
        raise ValueError(f"not a CAIP-19 asset id: {asset_id[:80]!r}")
    return get_chain(match["id"])


def with_endpoints(
    chain_id: int,
    *,
    rpc_url: str | None = None,
    bundler_url: str | None = None,
    table: tuple[Chain, ...] | None = None,
) -> tuple[Chain, ...]:
    """The table (settings.CHAINS by default) with one chain's RPC and/or bundler URL changed:
    how the local stack on free ports, and tests pointing one chain at a dead port, set it."""
    rows = settings.CHAINS if table is None else table
    if not any(row.id == chain_id for row in rows):
        raise UnknownChain(chain_id)
    return tuple(
        replace(
            row,
            rpc_url=row.rpc_url if rpc_url is None else rpc_url,
            bundler_url=row.bundler_url if bundler_url is None else bundler_url,
        )
        if row.id == chain_id
        else row
        for row in rows
    )


def card_chain() -> Chain:
    """The chain the card (Gnosis Pay's Safe and Delay module) lives on."""
    return get_chain(settings.CARD_CHAIN_ID)
