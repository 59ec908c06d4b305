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
from django.core.exceptions import ValidationError
from oauth2_provider import cimd as dot_cimd
from oauth2_provider.models import get_application_model

from oauth.policy import redirect_uri_problem
from oauth.services import client_profile_record

logger = logging.getLogger(__name__)


class ProfileKeepingFetcher(dot_cimd.SafeMetadataFetcher):
    def fetch(self, client_id):
        metadata, max_age = super().fetch(client_id)
        check_document(client_id, metadata)
        client_profile_record(client_id=client_id, metadata=metadata)
        return metadata, max_age


def check_document(client_id: str, metadata: dict) -> None:
    """Every check the document must pass before anything of it is kept: ours (the redirect
    policy dynamic registration applies too) and the ones DOT makes after the fetch (its
    client id, public client, grants, its Application's fields), so a document that fails
    leaves no profile behind. Raises DOT's CIMDError (a 400 at the authorization endpoint)."""
    if metadata.get("client_id") != client_id:
        raise dot_cimd.CIMDError("document client_id does not match the client_id URL")
    kwargs = dot_cimd._build_application_kwargs(metadata)
    for uri in metadata["redirect_uris"]:
        problem = redirect_uri_problem(uri, client_id=client_id)
        if problem:
            raise dot_cimd.CIMDError(f"redirect_uris: {problem}")
    Application = get_application_model()
    existing = Application.objects.filter(client_id=client_id).first()
    if existing is not None and existing.registration_source != Application.RegistrationSource.CIMD:
        raise dot_cimd.CIMDError("client_id URL collides with a non-CIMD application")
    candidate = Application(
        client_id=client_id,
        client_type=Application.CLIENT_PUBLIC,
        registration_source=Application.RegistrationSource.CIMD,
        **kwargs,
    )
    try:
        candidate.full_clean(exclude=["client_secret"], validate_unique=False)
    except ValidationError as exc:
        raise dot_cimd.CIMDError("invalid client metadata: " + "; ".join(exc.messages)) from exc


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
