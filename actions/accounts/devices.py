"""Devices of one account: "add a device" links, the device a passkey was created on, and the
limiter on recovery-code attempts. What changes the owners on chain is in
`owner_changes.py`."""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from actions.accounts.models import DeviceLink, OwnerState, Passkey, SmartAccount, SmartAccountKind
from core import throttle


class DeviceError(Exception):
    """A device step that is refused; `code` picks the sentence the end-user page shows."""

    def __init__(self, message: str, *, code: str):
        super().__init__(message)
        self.code = code


def coarse_ip(address: str) -> str:
    """The network a request came from, not the host: the /24 of an IPv4 address, the /48 of
    an IPv6 one ("203.0.113.0/24"). Enough to recognise "my home", not to find anyone."""
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return ""
    prefix = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def device_of(request) -> dict[str, str]:
    """What a passkey registered from this request records about its device."""
    return {
        "user_agent": request.headers.get("User-Agent", "")[:300],
        "ip_coarse": coarse_ip(request.META.get("REMOTE_ADDR", "")),
    }


def has_account(*, user) -> bool:
    return SmartAccount.objects.filter(
        user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False
    ).exists()


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def device_link_create(*, user) -> tuple[DeviceLink, str]:
    """A link for another device of the same user, valid DEVICE_LINK_TTL_SECONDS, once. Only
    the token's hash is stored: the link is shown once, on the page that made it."""
    if not has_account(user=user):
        raise DeviceError("No account to add a device to yet", code="no_account")
    token = secrets.token_urlsafe(32)
    now = timezone.now()
    link = DeviceLink.objects.create(
        user=user,
        token_hash=_token_hash(token),
        created_at=now,
        expires_at=now + timedelta(seconds=settings.DEVICE_LINK_TTL_SECONDS),
    )
    return link, token


def device_link_open(*, user, token: str) -> DeviceLink:
    """Claim a link for this (signed-in) user: one conditional UPDATE, so a link opened twice,
    even at once, is claimed once. A link of another user, expired or already opened is
    refused and left as it was."""
    link = DeviceLink.objects.filter(token_hash=_token_hash(token)).first()
    if link is None:
        raise DeviceError("No such device link", code="link_unknown")
    if link.user_id != user.pk:
        raise DeviceError("This device link belongs to another account", code="link_other_user")
    if link.opened_at is not None:
        raise DeviceError("This device link was already used", code="link_used")
    now = timezone.now()
    if link.expires_at <= now:
        raise DeviceError("This device link expired", code="link_expired")
    claimed = DeviceLink.objects.filter(
        pk=link.pk, user=user, opened_at__isnull=True, expires_at__gt=now
    ).update(opened_at=now)
    if claimed != 1:
        raise DeviceError("This device link was already used", code="link_used")
    link.opened_at = now
    return link


@transaction.atomic
def device_link_bind(*, link_id: int, user, passkey: Passkey) -> bool:
    """The passkey registered after opening a link belongs to it (the approval page says it
    came through the link). Once: a second passkey in the same session is a plain one."""
    return bool(
        DeviceLink.objects.filter(pk=link_id, user=user, passkey__isnull=True).update(
            passkey=passkey
        )
    )


def pending_passkey(*, user, passkey_id: int) -> Passkey:
    passkey = Passkey.objects.filter(pk=passkey_id, user=user).first()
    if passkey is None:
        raise DeviceError("No such passkey", code="not_found")
    if passkey.owner_state != OwnerState.PENDING:
        raise DeviceError(f"This passkey is {passkey.owner_state}", code="not_pending")
    return passkey


# --- Recovery-code attempts ----------------------------------------------------------------


def _attempt_subjects(*, username: str, address: str) -> list[tuple[str, str]]:
    return [("recovery-user", username.strip().casefold()), ("recovery-ip", address)]


def recovery_throttled(*, username: str, address: str) -> bool:
    """Too many attempts for this username, or from this address, in the window. Counted in
    the shared cache (core.throttle: Redis in production), so every web process sees the same
    count."""
    limit = settings.RECOVERY_ATTEMPTS
    return any(
        throttle.count(name, subject) >= limit
        for name, subject in _attempt_subjects(username=username, address=address)
    )


def recovery_attempt_count(*, username: str, address: str) -> None:
    """Count one attempt, right or wrong (the derivation is slow on purpose; so is guessing)."""
    for name, subject in _attempt_subjects(username=username, address=address):
        throttle.hit(name, subject, window_seconds=settings.RECOVERY_ATTEMPTS_WINDOW_SECONDS)
