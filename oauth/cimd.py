"""Client ID Metadata Documents through django-oauth-toolkit's resolver, with our fetch.

DOT checks the client id (https only, the resolved address checked and pinned, no redirects),
keeps a per-URL failure backoff and an in-flight cap, and writes the Application (name,
redirect URIs). Our fetcher does the fetch itself through core/outbound.py, since DOT's bounds
each read, not the fetch (a document served a byte a second held a worker and its database
connection for minutes): the whole fetch ends by OAUTH2_CIMD_FETCH_SECONDS, and the request's
database connection is given back first. It also keeps what DOT drops: the client's home page
and logo, for the consent page.
"""

from __future__ import annotations

import ipaddress
import logging
import socket

from django.conf import settings
from django.core.exceptions import ValidationError
from oauth2_provider import cimd as dot_cimd
from oauth2_provider.models import get_application_model
from oauth2_provider.settings import oauth2_settings

from core import outbound
from oauth.policy import redirect_uri_problem
from oauth.services import client_profile_record

logger = logging.getLogger(__name__)


class ProfileKeepingFetcher(dot_cimd.SafeMetadataFetcher):
    def fetch(self, client_id):
        metadata, max_age = self._fetch_bounded(client_id)
        check_document(client_id, metadata)
        client_profile_record(client_id=client_id, metadata=metadata)
        return metadata, max_age

    def _fetch_bounded(self, client_id):
        """DOT's fetch (same checks, headers and answer rules) under one total deadline.
        A document not whole by then is a CIMDError: the client is unknown (401
        invalid_client at the token endpoint, 400 at the authorization endpoint)."""
        parsed = dot_cimd._validate_client_id_url(client_id)
        port = parsed.port or 443
        seconds = settings.OAUTH2_CIMD_FETCH_SECONDS
        deadline = outbound.deadline_in(seconds)
        # The wait is on a client-controlled server: no pool connection is held through it.
        outbound.db_release()
        # Looked up at call time: install_loopback_switch() may have wrapped it.
        ips = dot_cimd._resolve_and_validate(parsed.hostname, port)
        path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
        headers = {"Host": parsed.netloc, "Accept": "application/json, application/*+json"}
        try:
            answer = outbound.get_any(
                ips=list(ips),
                port=port,
                host=parsed.hostname,
                path=path,
                secure=True,
                headers=headers,
                deadline=deadline,
                max_bytes=oauth2_settings.CIMD_MAX_DOCUMENT_SIZE,
            )
        except outbound.DeadlineExceeded as exc:
            raise dot_cimd.CIMDError(f"client_id document not fetched within {seconds:g}s") from exc
        except outbound.TooLarge as exc:
            raise dot_cimd.CIMDError("client_id document exceeds the maximum allowed size") from exc
        except outbound.FetchFailed as exc:
            raise dot_cimd.CIMDError(f"could not fetch client_id document: {exc}") from exc
        return self._read_document(_Buffered(answer))


class _Buffered:
    """An answer read whole, in the shape DOT's `_read_document` reads (status, headers,
    read(n)), so its checks of the status, media type, size and JSON stay the ones it makes."""

    def __init__(self, answer: outbound.Answer):
        self.status = answer.status
        self.headers = answer.headers
        self._body = answer.body

    def read(self, amount: int) -> bytes:
        return self._body[:amount]


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
