"""The session keys of spending permissions, encrypted at rest.

One key per grant, made on the server when an agent asks, encrypted with the deployment's
Fernet keys (SPEND_PERMISSION_KEYS, MultiFernet: rotate by putting a new key first) and kept
only in `SpendPermission.session_key_encrypted`. Decrypted in memory only to sign one user
operation under the permission; never logged, never shown (admin, API, pages). Emptied when
the grant ends: a destroyed key can sign nothing, whatever the chain still says."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SessionKeyUnavailable(Exception):
    """The key is destroyed, or cannot be decrypted with the configured keys."""


def _fernet() -> MultiFernet:
    return MultiFernet([Fernet(key) for key in settings.SPEND_PERMISSION_KEYS])


def seal(private_key: bytes) -> str:
    return _fernet().encrypt(private_key).decode()


def unseal(sealed: str) -> bytes:
    if not sealed:
        raise SessionKeyUnavailable("the permission's session key was destroyed")
    try:
        return _fernet().decrypt(sealed.encode())
    except InvalidToken:
        raise SessionKeyUnavailable(
            "the permission's session key cannot be decrypted with SPEND_PERMISSION_KEYS"
        ) from None
