"""A pytest plugin that records the API's answers while the suite runs, for refactors that must
not change them: `pytest -p mcp_adapter.contract_recorder` with `PICNIC_CONTRACT_RECORD=<file>`.

It keeps, per test, the set of distinct bodies the three status tools answered and every 4xx
body any API view answered, with ids, times and hashes replaced by placeholders, and the MCP
`tools/list` of both profiles. Run it before and after a change and diff the two files.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from typing import Any

import anyio
import pytest

STATUS_VIEWS = {"ActionStatusView", "DeliveryStatusView", "OperationStatusView"}
_PLACEHOLDERS = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"0x[0-9a-fA-F]{9,}"), "<hex>"),
    (re.compile(r"\b\d{10,}\b"), "<big>"),
]


def _normal(value: Any) -> Any:
    text = json.dumps(value, sort_keys=True, default=str)
    for pattern, placeholder in _PLACEHOLDERS:
        text = pattern.sub(placeholder, text)
    return json.loads(text)


class Recorder:
    def __init__(self, path: str):
        self.path = path
        self.current = "(collection)"
        self.records: dict[str, set[str]] = defaultdict(set)

    def record(self, view: str, method: str, code: int, data: Any) -> None:
        line = json.dumps([view, method, code, _normal(data)], sort_keys=True)
        self.records[self.current].add(line)

    def write(self) -> None:
        # Here, not at the top: pytest loads this plugin before Django is set up.
        from mcp_adapter.server import PicnicMCP

        tools = {}
        for profile in ("core", "full"):
            server = PicnicMCP(profile=profile, output_schemas=True)
            listed = anyio.run(server.list_tools)
            tools[profile] = [t.model_dump(mode="json", exclude_none=True) for t in listed]
        with open(self.path, "w") as out:
            out.write(json.dumps({"tools/list": tools}, indent=1, sort_keys=True) + "\n")
            for test in sorted(self.records):
                for line in sorted(self.records[test]):
                    out.write(f"{test} {line}\n")


_recorder: Recorder | None = None


def pytest_configure(config):
    global _recorder
    path = os.environ.get("PICNIC_CONTRACT_RECORD")
    if not path:
        return
    _recorder = Recorder(path)
    from rest_framework.views import APIView  # after Django's set-up, like the server's

    original = APIView.finalize_response

    def finalize_response(self, request, response, *args, **kwargs):
        response = original(self, request, response, *args, **kwargs)
        name = type(self).__name__
        code = getattr(response, "status_code", 0)
        if name in STATUS_VIEWS or 400 <= code < 500:
            _recorder.record(name, request.method, code, getattr(response, "data", None))
        return response

    APIView.finalize_response = finalize_response


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if _recorder is not None:
        _recorder.current = item.nodeid


def pytest_unconfigure(config):
    if _recorder is not None:
        _recorder.write()
