"""Fixed-window counters in the default cache: how many times a subject did something in the
current window. Shared by every process with CACHE_URL=redis://… (production: one count for
all web processes and machines); per process on the embedded locmem cache, which is enough
for `make run`'s single web process.

Subjects (a username and address, a host) are hashed into the key: no personal data and no
client-chosen bytes in cache keys.
"""

from __future__ import annotations

import hashlib

from django.core.cache import cache


def key(name: str, subject: str) -> str:
    return f"throttle:{name}:{hashlib.sha256(subject.encode()).hexdigest()}"


def hit(name: str, subject: str, *, window_seconds: int) -> int:
    """Count one more for `subject` and return the count in the current window."""
    cache_key = key(name, subject)
    # add() opens the window; incr() is atomic on Redis (and locmem).
    if cache.add(cache_key, 1, timeout=window_seconds):
        return 1
    try:
        return cache.incr(cache_key)
    except ValueError:  # the window closed between add() and incr()
        cache.add(cache_key, 1, timeout=window_seconds)
        return 1


def count(name: str, subject: str) -> int:
    """The count for `subject` in the current window, without adding to it."""
    return cache.get(key(name, subject)) or 0


def clear(name: str, subject: str) -> None:
    cache.delete(key(name, subject))
