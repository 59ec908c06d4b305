"""docs/examples/mcp_operation.py, run as docs/operations-mcp.md says (a program, a pasted
token) against the real streamable-HTTP MCP server and the live API, while staff approve the
review in the console and the beat's services run against the local backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from console.moves import MOVES, apply_move
from dev.providers.local_openai import LocalResponsesServer
from operations import billing
from operations.models import Operation, State
from operations.services import operations_process_due
from operations.tests.factories import fund

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "mcp_operation.py"

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_operation_example_walks_quote_start_review_result(
    http_server, user, application, make_token, staff_user, settings
):
    fund(user, "100")
    token = make_token(user, application, scope="operations:read operations:write")
    settings.OPERATIONS_REVIEW_RULES = ["category:reviewed"]
    stop = threading.Event()

    def staff_and_beat():
        approved = False
        while not stop.is_set():
            operation = Operation.objects.filter(owner=user).first()
            if operation is not None and operation.state == State.NEEDS_REVIEW and not approved:
                time.sleep(1)  # the agent sees it wait for a reviewer first
                outcome = apply_move(
                    move=MOVES["operation:approve"],
                    key=f"operation:{operation.pk}",
                    entity=operation,
                    user=staff_user,
                    note="looks fine",
                    extra={},
                )
                approved = outcome.ok
            operations_process_due()
            time.sleep(0.1)

    with LocalResponsesServer(api_key="k", work_seconds=0.3) as backend:
        settings.OPERATIONS_BACKEND_URL, settings.OPERATIONS_BACKEND_API_KEY = backend.url, "k"
        settings.OPERATIONS_POLL_SECONDS = 0.0
        with http_server() as http:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PICNIC_MCP_")}
            env.update(PICNIC_MCP_URL=http.url, PICNIC_MCP_TOKEN=token.token)
            thread = threading.Thread(target=staff_and_beat)
            thread.start()
            try:
                done = subprocess.run(
                    [
                        sys.executable,
                        str(EXAMPLE),
                        "A haiku about picnics",
                        "--category",
                        "reviewed",
                    ],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            finally:
                stop.set()
                thread.join()
    assert done.returncode == 0, done.stderr
    assert "Waiting for a reviewer" in done.stderr and "Succeeded" in done.stderr
    result = json.loads(done.stdout)
    operation = Operation.objects.get(owner=user)
    assert result["operation_id"] == str(operation.pk) and result["ready"] is True
    assert result["result"] == operation.result and result["result"]["output_text"]
    assert operation.state == State.SUCCEEDED and operation.channel == "mcp"
    assert billing.invariants(operation) == []


def test_the_operation_example_needs_a_token():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICNIC_MCP_")}
    refused = subprocess.run(
        [sys.executable, str(EXAMPLE), "hi"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert refused.returncode == 2 and "set PICNIC_MCP_TOKEN" in refused.stderr
