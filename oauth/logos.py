"""Agents' logos, fetched by us and served from our own origin (like GitHub's camo), so the
pages keep `img-src 'self' data:` and a client's logo host never sees our users.

A logo URL is https (http only for a loopback host, and only with AGENT_LOGO_ALLOW_LOOPBACK,
local runs and tests). The host is resolved and every address checked before we connect, and
the connection goes to the checked address (no second lookup to rebind): a public address
only, or loopback only with the setting on; private, link-local and metadata addresses never.
No redirect is followed. The answer must be 200, a PNG, JPEG, WebP or GIF (never SVG) within
AGENT_LOGO_MAX_BYTES and AGENT_LOGO_TIMEOUT_SECONDS. Pillow decodes it (the bytes must be one
of those formats, whatever the Content-Type said) and it is re-encoded as a PNG of at most
AGENT_LOGO_PIXELS a side: what we serve is our own encoding, never the client's bytes.
"""

from __future__ import annotations

import io
import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings
from oauth2_provider.cimd import _ip_is_public
from PIL import Image, UnidentifiedImageError

from core import outbound
from oauth.policy import LOOPBACK_HOSTS, MAX_URI_LENGTH

CONTENT_TYPES = {"image/png", "image/jpeg", "image/webp", "image/gif"}
FORMATS = {"PNG", "JPEG", "WEBP", "GIF"}
# A larger picture is refused before it is decoded (a small file can hold a huge one).
MAX_SOURCE_PIXELS = 4096 * 4096


class LogoRefused(Exception):
    """Why a logo was not taken (logged with the client id; the page keeps its monogram)."""


def logo_uri_allowed(value: object) -> bool:
    """Whether `value` is a logo URL we would fetch: https, or http on a loopback host when
    AGENT_LOGO_ALLOW_LOOPBACK is on."""
    if (
        not isinstance(value, str)
        or len(value) > MAX_URI_LENGTH
        or not value.isprintable()
        or any(c.isspace() for c in value)
    ):
        return False
    if value.startswith("https://"):
        return True
    try:
        host = urlsplit(value).hostname
    except ValueError:
        return False
    return (
        settings.AGENT_LOGO_ALLOW_LOOPBACK
        and value.startswith("http://")
        and host in LOOPBACK_HOSTS
    )


def _addresses(host: str, port: int) -> list[str]:
    """The host's addresses, all of them allowed, or LogoRefused."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise LogoRefused(f"could not resolve {host}: {exc}") from exc
    ips = [info[4][0] for info in infos]
    if not ips:
        raise LogoRefused(f"{host} has no address")
    if settings.AGENT_LOGO_ALLOW_LOOPBACK and all(
        ipaddress.ip_address(ip).is_loopback for ip in ips
    ):
        return ips
    for ip in ips:
        if not _ip_is_public(ip):
            raise LogoRefused(f"{host} resolves to a non-public address ({ip})")
    return ips


def fetch(uri: str) -> bytes:
    """The logo's bytes as served, within the limits above, or LogoRefused. The whole fetch
    (every address tried, connect to last byte) ends by AGENT_LOGO_TIMEOUT_SECONDS: a logo
    served one byte a second is cut off there (core/outbound.py)."""
    if not logo_uri_allowed(uri):
        raise LogoRefused("not an https URL")
    parts = urlsplit(uri)
    secure = parts.scheme == "https"
    if not parts.hostname or parts.username or parts.password:
        raise LogoRefused("no host, or credentials in the URL")
    port = parts.port or (443 if secure else 80)
    ips = _addresses(parts.hostname, port)
    deadline = outbound.deadline_in(settings.AGENT_LOGO_TIMEOUT_SECONDS)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Host": parts.netloc, "Accept": ", ".join(sorted(CONTENT_TYPES))}
    limit = settings.AGENT_LOGO_MAX_BYTES
    try:
        answer = outbound.get_any(
            ips=list(ips),
            port=port,
            host=parts.hostname,
            path=path,
            secure=secure,
            headers=headers,
            deadline=deadline,
            max_bytes=limit,
        )
    except outbound.DeadlineExceeded as exc:
        raise LogoRefused(
            f"not fetched within {settings.AGENT_LOGO_TIMEOUT_SECONDS:g}s: {exc}"
        ) from exc
    except outbound.TooLarge as exc:
        raise LogoRefused(str(exc)) from exc
    except outbound.FetchFailed as exc:
        raise LogoRefused(f"could not fetch: {exc}") from exc
    return _checked(answer)


def _checked(answer: outbound.Answer) -> bytes:
    if answer.status != 200:
        raise LogoRefused(f"HTTP {answer.status}")  # a redirect included: never followed
    media_type = answer.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if media_type not in CONTENT_TYPES:
        raise LogoRefused(f"content type {media_type or 'missing'!r} is not an allowed image")
    return answer.body


def reencode(raw: bytes) -> bytes:
    """`raw` decoded as one of FORMATS and written again as a PNG of at most
    AGENT_LOGO_PIXELS a side (first frame of an animation), or LogoRefused."""
    try:
        with Image.open(io.BytesIO(raw), formats=sorted(FORMATS)) as image:
            if image.width * image.height > MAX_SOURCE_PIXELS:
                raise LogoRefused(f"{image.width}x{image.height} pixels is too large")
            image.seek(0)
            picture = image.convert("RGBA")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise LogoRefused(f"not a readable PNG, JPEG, WebP or GIF image: {exc}") from exc
    side = settings.AGENT_LOGO_PIXELS
    picture.thumbnail((side, side), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    picture.save(out, format="PNG", optimize=True)
    return out.getvalue()
