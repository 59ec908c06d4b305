"""The MCP server's calls to the API (mcp_adapter/api.py) run in its event loop on one shared
httpx client: no worker thread, calls side by side, the pool reused."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import anyio.to_thread

from mcp_adapter.api import PicnicApi, query_string


def _server_answering_once_both_are_in() -> tuple[ThreadingHTTPServer, list[str]]:
    """Each request is answered only once two requests are in: calls made one after the
    other (a loop blocked by the first) would never get their answers."""
    both = threading.Barrier(2, timeout=10)
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            both.wait()
            body = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_calls_run_side_by_side_in_the_event_loop_without_a_thread(monkeypatch):
    def no_thread(*args, **kwargs):
        raise AssertionError("an API call went to a worker thread")

    monkeypatch.setattr(anyio.to_thread, "run_sync", no_thread)
    server, seen = _server_answering_once_both_are_in()
    api = PicnicApi(f"http://127.0.0.1:{server.server_address[1]}", timeout=10)
    answers = {}

    async def main():
        async def one(name):
            answers[name] = await api.call("GET", f"/{name}", token="t", body={"a": True})

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "first")
            tg.start_soon(one, "second")
        client = api._http()
        await api.call("GET", "/again", token="t")
        assert api._http() is client  # the same client, its pool reused
        await api.aclose()

    try:
        anyio.run(main)
    finally:
        server.shutdown()
    assert answers["first"].body == {"path": "/first?a=True"}
    assert answers["second"].ok and sorted(seen[:2]) == ["/first?a=True", "/second?a=True"]


def test_a_gets_arguments_are_sent_as_they_always_were():
    assert query_string({"a": True, "b": None, "c": [1, "x y"], "d": 2}) == "a=True&c=1&c=x+y&d=2"
