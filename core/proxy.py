"""The client's address behind our own proxies: X-Forwarded-For is believed only
from a peer in TRUSTED_PROXY_IPS, and only up to the first address that is not a trusted
proxy, reading from the right (each proxy appends the address it saw; anything left of that
is whatever the client wrote). Throttles, device records and the access line then read
REMOTE_ADDR as the client's.

gunicorn's uvicorn workers do the same with the same list (picnic/gunicorn_conf.py); this
covers every other server (runserver, a WSGI host) and a peer uvicorn left as it was.
"""

from __future__ import annotations

import ipaddress
import logging

from django.conf import settings

log = logging.getLogger(__name__)


def _address(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    value = value.strip()
    if value.startswith("[") and "]" in value:  # [2001:db8::1]:443
        value = value[1 : value.index("]")]
    elif value.count(":") == 1:  # 192.0.2.1:443
        value = value.split(":", 1)[0]
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return any(address in network for network in settings.TRUSTED_PROXY_IPS)


def client_address(peer: str, forwarded_for: str) -> str:
    """The client of a request from `peer` carrying `forwarded_for` (X-Forwarded-For)."""
    address = _address(peer)
    if address is None or not _trusted(address):
        return peer
    for hop in reversed(forwarded_for.split(",")):
        hop_address = _address(hop)
        if hop_address is None:
            # A proxy of ours never writes this: nothing left of it can be believed.
            break
        address = hop_address
        if not _trusted(hop_address):
            break
    return str(address)


# What only a proxy of ours may say: from anyone else these are dropped, so that nothing
# further down (SECURE_PROXY_SSL_HEADER's X-Forwarded-Proto included) reads a client's claim.
FORWARDING_HEADERS = (
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_X_FORWARDED_PORT",
    "HTTP_FORWARDED",
    "HTTP_X_REAL_IP",
)


class ClientAddressMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response
        self.warned = False

    def __call__(self, request):
        meta = request.META
        peer = meta.get("REMOTE_ADDR", "")
        peer_address = _address(peer)
        if peer_address is None or not _trusted(peer_address):
            if "HTTP_X_FORWARDED_FOR" in meta and peer_address is not None:
                self._warn_once(peer_address)
            for name in FORWARDING_HEADERS:
                meta.pop(name, None)
        meta["REMOTE_ADDR"] = client_address(peer, meta.get("HTTP_X_FORWARDED_FOR", ""))
        return self.get_response(request)

    def _warn_once(self, peer: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
        # A proxy of ours that TRUSTED_PROXY_IPS forgot makes every client look like it: one
        # login throttle for everyone. Said once a process, for a peer on a private network.
        if self.warned or not (peer.is_private or peer.is_loopback):
            return
        self.warned = True
        log.warning(
            "X-Forwarded-For from %s, which TRUSTED_PROXY_IPS does not name: ignored. If it is "
            "a proxy of this deployment, every client has its address (docs/deploy.md)",
            peer,
        )
