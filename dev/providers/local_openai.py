"""A local backend speaking the OpenAI Responses API (background mode), for tests and
`make run`. It can be slow, fail, hang or lose the acknowledgement, per server (`mode`) or per
request (a marker in the input text: `[fail]`, `[lose-ack]`, `[hang]`, `[slow]`, `[reject]`,
`[overrun]`).

Each answer is 800 output tokens (300 of them reasoning). A request's `max_output_tokens` cuts
it there, as the real API does: the response is `incomplete` (`incomplete_details.reason:
"max_output_tokens"`) with the tokens used up to the limit; below 16 the request is refused
(400), as the real API refuses it. The `overrun` fault ignores the limit and answers all 800
tokens, `completed`: a backend that bills more than it was asked for.

It honours `Idempotency-Key`: the same key returns the response it already created. An outage
is `stop()` (connections refused) and later `restarted()` on the same port, with its store.

    python -m dev.providers.local_openai --port 8788
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from typing import Any

from dev.local_server import LocalJsonServer

MARKERS = ("fail", "lose-ack", "hang", "slow", "reject", "overrun")
OUTPUT_TOKENS, REASONING_TOKENS = 800, 300
# The Responses API refuses a smaller `max_output_tokens` ("Expected a value >= 16").
MIN_OUTPUT_TOKENS = 16


class LocalResponsesServer(LocalJsonServer):
    def __init__(
        self,
        *,
        port: int = 0,
        api_key: str | None = None,
        mode: str = "ok",
        work_seconds: float = 0.2,
    ):
        super().__init__(port=port)
        self.mode = mode
        self.api_key = api_key
        self.work_seconds = work_seconds
        self.responses: dict[str, dict[str, Any]] = {}
        self.by_key: dict[str, str] = {}
        self.creates: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def restarted(self) -> LocalResponsesServer:
        """Back from an outage: a new server on this (stopped) one's port that still knows
        every response and Idempotency-Key it accepted, as a real backend's store would."""
        server = LocalResponsesServer(
            port=self.httpd.server_address[1],
            api_key=self.api_key,
            mode=self.mode,
            work_seconds=self.work_seconds,
        )
        server.responses, server.by_key, server.creates = self.responses, self.by_key, self.creates
        return server.start()

    # --- protocol ------------------------------------------------------------------------

    def _authorized(self, handler) -> bool:
        if self.api_key and handler.headers.get("Authorization") != f"Bearer {self.api_key}":
            self.send_json(
                handler,
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
            return False
        return True

    def _view(self, response: dict[str, Any]) -> dict[str, Any]:
        """The response as it is now: background work finishes `work_seconds` after creation."""
        view = {k: v for k, v in response.items() if not k.startswith("_")}
        mode = response["_mode"]
        if view["status"] in ("queued", "in_progress"):
            elapsed = time.time() - view["created_at"]
            duration = self.work_seconds * (10 if mode == "slow" else 1)
            if elapsed < duration:
                view["status"] = "in_progress" if elapsed > duration / 2 else "queued"
            elif mode == "fail":
                view.update(
                    status="failed",
                    error={
                        "code": "server_error",
                        "message": "The model failed to generate a response.",
                    },
                )
            else:
                text = f"Generated for: {response['_input'][:60]}"
                output, reasoning = OUTPUT_TOKENS, REASONING_TOKENS
                limit = response["_max_output_tokens"]
                cut = limit is not None and limit < OUTPUT_TOKENS and mode != "overrun"
                if cut:
                    # Reasoning comes first and counts against the limit too.
                    output, reasoning = limit, min(REASONING_TOKENS, limit)
                    text = text[: max(output - reasoning, 0)]
                view.update(
                    status="incomplete" if cut else "completed",
                    incomplete_details={"reason": "max_output_tokens"} if cut else None,
                    output=[
                        {
                            "type": "message",
                            "id": f"msg_{view['id'][5:]}",
                            "status": "incomplete" if cut else "completed",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": text, "annotations": []}],
                        }
                    ],
                    usage={
                        "input_tokens": 1200,
                        "input_tokens_details": {"cached_tokens": 200},
                        "output_tokens": output,
                        "output_tokens_details": {"reasoning_tokens": reasoning},
                        "total_tokens": 1200 + output,
                    },
                )
        return view

    def on_post(self, handler) -> None:
        raw = self.read_body(handler)
        if not self._authorized(handler):
            return
        if handler.path.endswith("/cancel"):
            rid = handler.path.split("/")[-2]
            with self._lock:
                response = self.responses.get(rid)
                if response is None:
                    return self.send_json(
                        handler,
                        404,
                        {
                            "error": {
                                "message": f"No response found with id '{rid}'.",
                                "code": "not_found",
                            }
                        },
                    )
                if self._view(response)["status"] in ("queued", "in_progress"):
                    response["status"] = "cancelled"
            return self.send_json(handler, 200, self._view(response))
        try:
            body = json.loads(raw)
        except ValueError:
            return self.send_json(
                handler,
                400,
                {
                    "error": {
                        "message": "We could not parse the JSON body of your request.",
                        "code": "invalid_json",
                    }
                },
            )
        text = str(body.get("input", ""))
        mode = next((m for m in MARKERS if f"[{m}]" in text), self.mode)
        key = handler.headers.get("Idempotency-Key")
        limit = body.get("max_output_tokens")
        self.creates.append(
            {
                "key": key,
                "input": text,
                "model": body.get("model"),
                "max_output_tokens": limit,
                "traceparent": handler.headers.get("traceparent"),
            }
        )
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < MIN_OUTPUT_TOKENS
        ):
            return self.send_json(
                handler,
                400,
                {
                    "error": {
                        "message": "Invalid 'max_output_tokens': integer below minimum value. "
                        f"Expected a value >= {MIN_OUTPUT_TOKENS}, but got {limit!r} instead.",
                        "type": "invalid_request_error",
                        "param": "max_output_tokens",
                        "code": "integer_below_min_value",
                    }
                },
            )
        if mode == "reject":
            return self.send_json(
                handler,
                400,
                {
                    "error": {
                        "message": "Invalid value for 'input'.",
                        "type": "invalid_request_error",
                        "code": "invalid_value",
                    }
                },
            )
        with self._lock:
            rid = self.by_key.get(key) if key else None
            if rid is None:
                rid = f"resp_{uuid.uuid4().hex}"
                self.responses[rid] = {
                    "id": rid,
                    "object": "response",
                    "created_at": time.time(),
                    "status": "queued",
                    "background": True,
                    "model": body.get("model"),
                    "metadata": body.get("metadata") or {},
                    "output": [],
                    "usage": None,
                    "error": None,
                    "_mode": mode,
                    "_input": text,
                    "_max_output_tokens": limit,
                    "_acked": False,
                }
                if key:
                    self.by_key[key] = rid
            response = self.responses[rid]
        if mode == "hang":
            return self.hang()
        if mode == "lose-ack" and not response["_acked"]:
            # Accepted and working, but the acknowledgement never reaches the caller.
            response["_acked"] = True
            return self.drop(handler)
        return self.send_json(handler, 200, self._view(response))

    def on_get(self, handler) -> None:
        if not self._authorized(handler):
            return
        rid = handler.path.rstrip("/").split("/")[-1]
        response = self.responses.get(rid)
        if response is None:
            return self.send_json(
                handler,
                404,
                {"error": {"message": f"No response found with id '{rid}'.", "code": "not_found"}},
            )
        return self.send_json(handler, 200, self._view(response))


def main() -> None:
    parser = argparse.ArgumentParser(description="Local OpenAI Responses API (background mode)")
    parser.add_argument("--port", type=int, default=8788)
    parser.add_argument("--api-key")
    args = parser.parse_args()
    server = LocalResponsesServer(port=args.port, api_key=args.api_key, work_seconds=3)
    print(f"local Responses API on {server.url}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
