"""A stream lives no longer than its token: every SSE response (the GET stream, a POST
answered as a stream) re-checks the token before each event it sends and at least every
STREAM_GRANT_CHECK_SECONDS; once the token is revoked, deleted by a Disconnect or expired,
nothing more is sent and the stream ends cleanly (mcp_adapter/http.py puts it in front of
each authenticated request)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
from django.conf import settings
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

TokenCheck = Callable[[str], Awaitable[bool]]


class GrantWatch:
    """One request's response, cut off once its token no longer holds.

    Only a streaming answer (text/event-stream) is watched: before each chunk goes out the
    token is checked again, and a watcher checks it every STREAM_GRANT_CHECK_SECONDS between
    chunks. When the check fails the chunk is dropped, the response is ended with an empty
    final chunk (a clean end of stream, never a half-written event), and the app is told the
    client went away (`http.disconnect`), which is how the SDK closes a stream."""

    def __init__(self, token: str, check: TokenCheck):
        self.token = token
        self.check = check
        self.revoked = anyio.Event()
        self.streaming = False
        self.ended = False
        self.lock = anyio.Lock()

    async def run(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        self._receive, self._send = receive, send
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            try:
                await app(scope, self.receive, self.send)
            finally:
                tg.cancel_scope.cancel()

    async def _holds(self) -> bool:
        if self.revoked.is_set():
            return False
        try:
            holds = await self.check(self.token)
        except (DatabaseOperationalError, DatabaseInterfaceError):
            # The database is away (a restart, a failover): the stream stays and the token is
            # checked again next time. Ending it would drop the session's notifications for
            # good (the SDK's client reconnects its GET stream twice, then gives up), and no
            # one can revoke the token meanwhile (a revocation is a database write).
            logger.warning("could not re-check a stream's token; checking again later")
            return True
        if holds:
            return True
        self.revoked.set()
        return False

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(settings.STREAM_GRANT_CHECK_SECONDS)
            if self.streaming and not await self._holds():
                async with self.lock:
                    await self._end()
                return

    async def _end(self) -> None:
        if not self.ended:
            self.ended = True
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def send(self, message: Message) -> None:
        async with self.lock:
            if self.ended:
                return  # the stream was cut: what the app still sends goes nowhere
            if message["type"] == "http.response.start":
                content_type = Headers(raw=message.get("headers", [])).get("content-type", "")
                self.streaming = content_type.startswith("text/event-stream")
            elif message["type"] == "http.response.body" and self.streaming:
                if not await self._holds():
                    await self._end()
                    return
            await self._send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.ended = True

    async def receive(self) -> Message:
        """The client's next message, or `http.disconnect` as soon as the token is gone."""
        if self.revoked.is_set():
            return {"type": "http.disconnect"}
        received: list[Message] = []
        async with anyio.create_task_group() as tg:

            async def take() -> None:
                received.append(await self._receive())
                tg.cancel_scope.cancel()

            async def stop() -> None:
                await self.revoked.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(take)
            tg.start_soon(stop)
        return received[0] if received else {"type": "http.disconnect"}
