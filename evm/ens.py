"""ENS (EIP-137 registry, EIP-181 reverse records) read over JSON-RPC, without Django.

- `normalize(name)`: ENSIP-15 through web3.py's maintained implementation (`ens.utils`); a
  refused name raises EnsNameInvalid with the normaliser's reason.
- `EnsReader(w3, registry).resolve(name)`: registry.resolver(node), then resolver.addr(node).
  Both calls go in ONE JSON-RPC batch: the second is sent to the resolver the last lookup on
  this registry used (nearly every name sits on the public resolver) and is trusted only when
  the registry names that same resolver; otherwise a second round trip asks the right one. The
  same batch checks the registry has code, so a wrong address in the chain table is named.
- `EnsReader.reverse_name(address)`: the `<addr>.addr.reverse` name, then the forward check;
  a name whose forward address is not `address` is not returned.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

from ens.exceptions import InvalidName
from ens.utils import normalize_name
from eth_abi import decode, encode
from eth_abi.exceptions import DecodingError
from eth_utils import keccak, to_checksum_address
from web3 import Web3

ZERO_ADDRESS = "0x" + "00" * 20
# DNS's limit for a whole name; ENS names longer than this cannot be used as DNS names either.
MAX_NAME_LENGTH = 255

_RESOLVER = keccak(text="resolver(bytes32)")[:4]
_ADDR = keccak(text="addr(bytes32)")[:4]
_NAME = keccak(text="name(bytes32)")[:4]


class EnsError(Exception):
    """An ENS name could not be used; `code` is the API error code."""

    code = "ens_error"


class EnsNameInvalid(EnsError):
    code = "ens_name_invalid"


class EnsNameNotFound(EnsError):
    code = "ens_name_not_found"


class EnsUnavailable(EnsError):
    """The chain did not answer, or answered something that is not ENS."""

    code = "ens_unavailable"


@lru_cache(maxsize=4096)  # web3.py's ENSIP-15 takes milliseconds a name; names repeat
def normalize(name: str) -> str:
    """The ENSIP-15 normalised name, or EnsNameInvalid with the reason."""
    if len(name) > MAX_NAME_LENGTH:
        raise EnsNameInvalid(f"the name is longer than {MAX_NAME_LENGTH} characters")
    try:
        normal = normalize_name(name)
    except InvalidName as exc:
        raise EnsNameInvalid(str(exc)) from None
    if not normal or "." not in normal:
        raise EnsNameInvalid("a name has at least two labels, like merchant.eth")
    if len(normal.encode()) > MAX_NAME_LENGTH:
        raise EnsNameInvalid(f"the name is longer than {MAX_NAME_LENGTH} bytes")
    return normal


def namehash(name: str) -> bytes:
    """EIP-137 namehash of an already normalised name."""
    node = b"\0" * 32
    if name:
        for label in reversed(name.split(".")):
            node = keccak(node + keccak(text=label))
    return node


def reverse_name(address: str) -> str:
    return f"{address.lower()[2:]}.addr.reverse"


def _call(to: str, selector: bytes, node: bytes) -> tuple[str, list[Any]]:
    data = "0x" + (selector + encode(["bytes32"], [node])).hex()
    return "eth_call", [{"to": to, "data": data}, "latest"]


class EnsReader:
    """ENS reads against one registry on one chain. Counts its JSON-RPC round trips."""

    # registry address (lower) → the resolver the last lookup found: the batch's guess.
    _last_resolver: dict[str, str] = {}
    _lock = threading.Lock()

    def __init__(self, w3: Web3, registry: str) -> None:
        self.w3 = w3
        self.registry = to_checksum_address(registry)
        self.round_trips = 0

    # --- transport --------------------------------------------------------------------------

    def _batch(self, calls: list[tuple[str, list[Any]]]) -> list[dict]:
        self.round_trips += 1
        answers = self.w3.provider.make_batch_request(calls)
        if not isinstance(answers, list) or len(answers) != len(calls):
            # A node that refuses batches answers one error object for the whole request.
            raise EnsUnavailable(f"the node did not answer the batch: {answers!r:.200}")
        return sorted(answers, key=lambda a: a.get("id", 0))

    @staticmethod
    def _word(answer: dict, types: list[str]) -> Any | None:
        """The decoded result, or None when the call reverted or returned nothing (no code)."""
        result = answer.get("result")
        if answer.get("error") is not None or not result or result == "0x":
            return None
        try:
            return decode(types, bytes.fromhex(result[2:]))[0]
        except (DecodingError, ValueError):  # not the ABI encoding asked for
            return None

    # --- lookups ----------------------------------------------------------------------------

    def _lookup(self, node: bytes, selector: bytes, types: list[str]) -> Any | None:
        """registry.resolver(node) and <guessed resolver>.<selector>(node) in one batch."""
        key = self.registry.lower()
        with self._lock:
            guess = self._last_resolver.get(key)
        calls = [("eth_getCode", [self.registry, "latest"]), _call(self.registry, _RESOLVER, node)]
        if guess:
            calls.append(_call(guess, selector, node))
        answers = self._batch(calls)
        if answers[0].get("error") is not None:
            raise EnsUnavailable(f"eth_getCode failed: {answers[0]['error']}")
        if answers[0].get("result") in (None, "0x", "0x0"):
            raise EnsUnavailable(f"there is no ENS registry at {self.registry}")
        resolver = self._word(answers[1], ["address"])
        if answers[1].get("error") is not None or resolver is None:
            raise EnsUnavailable(f"registry.resolver failed: {answers[1].get('error')}")
        resolver = to_checksum_address(resolver)
        if resolver == ZERO_ADDRESS:
            return None
        if guess and resolver.lower() == guess.lower():
            return self._word(answers[2], types)
        with self._lock:
            self._last_resolver[key] = resolver
        return self._word(self._batch([_call(resolver, selector, node)])[0], types)

    def resolve(self, name: str) -> str:
        """The address `name` (normalised) points at; EnsNameNotFound when it has no resolver,
        no address record, or the zero address."""
        address = self._lookup(namehash(name), _ADDR, ["address"])
        if address is None or int(address, 16) == 0:
            raise EnsNameNotFound(f"{name} does not resolve to an address")
        return to_checksum_address(address)

    def reverse_name(self, address: str) -> str | None:
        """The verified primary name of `address`: its reverse record, if that name is
        ENSIP-15 normal and resolves back to `address`. None otherwise."""
        name = self._lookup(namehash(reverse_name(address)), _NAME, ["string"])
        if not name:
            return None
        try:
            if normalize(name) != name:
                return None
            forward = self.resolve(name)
        except (EnsNameInvalid, EnsNameNotFound):
            return None
        return name if forward.lower() == address.lower() else None
