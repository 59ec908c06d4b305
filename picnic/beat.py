"""Exactly one Celery beat: the scheduler ticks only while it holds the beat lock.

On PostgreSQL the lock is a session-level advisory lock (`pg_try_advisory_lock`) taken on a
connection of its own and held for the life of the process: any number of beats may be
started (one per machine, for availability); one ticks, the others wait as hot standbys and
try again every BEAT_LOCK_RETRY_SECONDS. When the ticking beat dies, however it dies (SIGKILL,
a lost machine), PostgreSQL ends its session and releases the lock, and a standby takes over.
No lease to tune and no clock to trust: the database's own session is the lock.

Every tick first checks that the lock's session is still alive (`SELECT 1`). If it is not (the
database restarted, the connection was cut), another beat may already hold the lock, so this
one stops ticking and exits for its supervisor to restart it as a standby.

On SQLite (the embedded default: one machine) the lock is an exclusive `flock` on a file under
var/, which the kernel releases when the process dies.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import time
from pathlib import Path

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connections

logger = logging.getLogger(__name__)


def beat_lock_key() -> int:
    """The advisory-lock key: fixed per queue prefix, so systems sharing a database (and not a
    broker) each have their own beat."""
    digest = hashlib.sha256(f"picnic.beat:{settings.CELERY_QUEUE_PREFIX}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresBeatLock:
    def __init__(self) -> None:
        # A connection of its own: Django closes and reopens the default one at will, and
        # closing it would release the lock.
        self._wrapper = connections.create_connection("default")
        self.key = beat_lock_key()

    def try_acquire(self) -> bool:
        self._wrapper.ensure_connection()
        with self._wrapper.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
            acquired = bool(cursor.fetchone()[0])
        if not acquired:
            self._wrapper.close()  # a standby holds no idle connection
        return acquired

    def still_held(self) -> bool:
        try:
            with self._wrapper.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
        except DatabaseError:
            logger.exception("beat: the session holding the beat lock is gone")
            return False
        return True

    def release(self) -> None:
        self._wrapper.close()  # ending the session releases the lock


class FileBeatLock:
    def __init__(self) -> None:
        self.path = Path(settings.VAR_DIR) / "celerybeat.lock"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = None

    def try_acquire(self) -> bool:
        handle = open(self.path, "a")  # noqa: SIM115 - kept open while the lock is held
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self._file = handle
        return True

    def still_held(self) -> bool:
        return self._file is not None

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def beat_lock():
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        return PostgresBeatLock()
    return FileBeatLock()


class SingleBeatScheduler(PersistentScheduler):
    """celery beat's file-backed scheduler, behind the beat lock (CELERY_BEAT_SCHEDULER)."""

    def setup_schedule(self):
        self.lock = beat_lock()
        retry = settings.BEAT_LOCK_RETRY_SECONDS
        waiting = False
        while not self.lock.try_acquire():
            if not waiting:
                logger.info(
                    "beat: another beat holds the lock; standing by (retry every %ss)", retry
                )
                waiting = True
            # SIGTERM/SIGINT raise SystemExit here (beat's own handlers): a standby stops at once.
            time.sleep(retry)
        logger.info("beat: acquired the beat lock; this beat schedules")
        super().setup_schedule()

    def tick(self, *args, **kwargs):
        if not self.lock.still_held():
            logger.error("beat: lost the beat lock; exiting so that only one beat ticks")
            raise SystemExit(1)
        return super().tick(*args, **kwargs)

    def close(self):
        try:
            super().close()
        finally:
            self.lock.release()
