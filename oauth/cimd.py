"""Client ID Metadata Documents through django-oauth-toolkit's fetcher.

DOT fetches the document (https only, the resolved address checked and pinned, no redirects,
bounded time and size, a per-URL failure backoff and an in-flight cap) and writes the
Application (name, redirect URIs). Ours only keeps what DOT drops: the client's home page and
logo, for the consent page.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from django.conf import settings
from oauth2_provider import cimd as dot_cimd

from oauth.services import client_profile_record

logger = logging.getLogger(__name__)


class ProfileKeepingFetcher(dot_cimd.SafeMetadataFetcher):
    def fetch(self, client_id):
        metadata, max_age = super().fetch(client_id)
        # DOT checks this too, after us: never keep a profile for a document that claims to
        # be another client.
        if metadata.get("client_id") == client_id:
            client_profile_record(client_id=client_id, metadata=metadata)
        return metadata, max_age


def install_loopback_switch() -> None:
    """Let OAUTH2_CIMD_ALLOW_LOOPBACK (off by default; tests only) admit loopback addresses
    to DOT's address check, which otherwise refuses everything that is not public. Only
    loopback: private, link-local and metadata addresses stay refused either way. DOT's
    fetcher has no hook for this, so its resolver is wrapped once, at start."""
    original = dot_cimd._resolve_and_validate
    if getattr(original, "picnic_wrapped", False):
        return

    def resolve(hostname, port):
        if settings.OAUTH2_CIMD_ALLOW_LOOPBACK:
            try:
                infos = socket.getaddrinfo(hostname, port, proto=socket.IPPROTO_TCP)
            except socket.gaierror as exc:
                raise dot_cimd.CIMDError(f"could not resolve client_id host: {exc}") from exc
            ips = [info[4][0] for info in infos]
            if ips and all(ipaddress.ip_address(ip).is_loopback for ip in ips):
                logger.warning(
                    "CIMD: fetching %s from loopback (OAUTH2_CIMD_ALLOW_LOOPBACK)", hostname
                )
                return ips
        return original(hostname, port)

    resolve.picnic_wrapped = True
    dot_cimd._resolve_and_validate = resolve
