"""A transfer called as an MCP task on the real chain stack (Hardhat/EDR node, Alto bundler):
the task waits for the passkey signature at sign_url, then for the bundler, can no longer be
cancelled once signed, and `tasks/result` returns the executed action."""

from __future__ import annotations

import json
import threading

import pytest

from actions.execution.models import Action, ActionStatus
from actions.execution.services import action_submit, actions_reconcile_pending
from actions.execution.signing import action_sign
from actions.tests.conftest import (  # noqa: F401 - shared fixtures
    ORIGIN,
    make_user_registered,
    registered,
    usdc_id,
    webauthn_settings,
)
from dev.testing import wait_until
from mcp_adapter.models import McpTask
from mcp_adapter.tests.test_tasks import LEGACY, RELATED, HttpRpc

pytestmark = [pytest.mark.chain, pytest.mark.django_db(transaction=True)]
RECIPIENT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"


def test_a_transfer_task_waits_for_the_signature_then_the_bundler(
    http_server,
    registered,  # noqa: F811 - the imported fixture
    user,
    application,
    make_token,
):
    passkey, _account, _w3 = registered
    token = make_token(user, application, scope="read:actions write:actions")
    with http_server() as http:
        rpc = HttpRpc(http.url, token.token, LEGACY)
        arguments = {"asset_id": usdc_id(), "amount": "1.5", "to": RECIPIENT}
        created = rpc.call("tools/call", {"name": "transfer", "arguments": arguments, "task": {}})
        task = created["result"]["task"]
        action = Action.objects.get(pk=McpTask.objects.get(pk=task["taskId"]).entity_id)
        assert task["status"] == "working"
        assert task["statusMessage"].startswith(
            f"Waiting for the user's passkey signature at {ORIGIN}/sign/{action.pk}/"
        )

        assertion = json.dumps(passkey.get_json(bytes.fromhex(action.user_op_hash[2:])))
        action_sign(action_id=action.pk, user=user, credential_json=assertion)
        got = rpc.call("tasks/get", {"taskId": task["taskId"]})["result"]
        assert got["status"] == "working"
        assert got["statusMessage"] == (
            "Signed by the user; submitting the user operation to the bundler."
        )
        action_submit(action_id=action.pk)  # what the enqueued task does
        # Signed and with the bundler: too late to withdraw, and said so.
        refused = rpc.call("tasks/cancel", {"taskId": task["taskId"]})["error"]
        assert refused["code"] == -32602 and refused["message"].startswith("Cannot cancel task:")
        assert Action.objects.get(pk=action.pk).status != ActionStatus.REJECTED

        def reconcile():  # the beat's reconciler, until the receipt is in
            wait_until(
                lambda: (
                    actions_reconcile_pending()
                    and Action.objects.get(pk=action.pk).status == ActionStatus.EXECUTED
                ),
                timeout=60,
                interval=0.5,
            )

        thread = threading.Thread(target=reconcile)
        thread.start()
        result = rpc.call("tasks/result", {"taskId": task["taskId"]}, timeout=90)["result"]
        thread.join()
        assert result["isError"] is False
        assert result["structuredContent"]["status"] == "executed"
        assert result["structuredContent"]["tx_hash"]
        assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
        assert rpc.call("tasks/get", {"taskId": task["taskId"]})["result"]["status"] == "completed"
