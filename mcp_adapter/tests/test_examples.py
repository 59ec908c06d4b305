"""docs/examples/mcp_pasted_token.py, run as the docs say (a program, a pasted token) against
the real streamable-HTTP MCP server in front of the live API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from actions.execution.models import Action, ActionStatus
from actions.execution.signing import action_sign
from actions.tests.conftest import (  # noqa: F401 - shared fixtures
    make_user_registered,
    registered,
    usdc_id,
    webauthn_settings,
)
from chain.dev import mint
from dev.testing import history_statuses

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "mcp_pasted_token.py"
RECIPIENT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"  # the README's first walk

pytestmark = pytest.mark.django_db(transaction=True)


def run_example(url: str | None, token: str | None, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICNIC_MCP_")}
    if url:
        env["PICNIC_MCP_URL"] = url
    if token:
        env["PICNIC_MCP_TOKEN"] = token
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_pasted_token_example_reads_an_action_and_reports_errors(
    http_server, action, user, application, make_token, api_client
):
    token = make_token(user, application, scope="read:actions")
    with http_server() as http:
        read = run_example(
            http.url, token.token, "get_action_status", json.dumps({"action_id": str(action.pk)})
        )
        missing = run_example(
            http.url, token.token, "get_action_status", '{"action_id": "no-such-action"}'
        )
    assert read.returncode == 0, read.stderr
    # What the tool printed is the API's status answer for the same action.
    assert json.loads(read.stdout) == api_client.get(f"/api/v1/actions/{action.pk}", token).json()
    assert json.loads(read.stdout)["status"] == "proposed"
    assert missing.returncode == 1
    assert "Action not found: no-such-action" in missing.stderr
    assert history_statuses(Action.objects.get(pk=action.pk)) == ["proposed"]


def test_the_pasted_token_example_needs_a_token():
    refused = run_example(None, None, "get_balances")
    assert refused.returncode == 2
    assert "set PICNIC_MCP_TOKEN" in refused.stderr


@pytest.mark.chain
def test_the_pasted_token_example_proposes_the_first_walks_transfer(
    http_server,
    registered,  # noqa: F811 - the imported fixture
    user,
    application,
    make_token,
):
    _passkey, account, _w3 = registered
    token = make_token(user, application, scope="read:balances write:actions")
    with http_server() as http:
        balances = run_example(http.url, token.token, "get_balances")
        assert balances.returncode == 0, balances.stderr
        # The walk takes the USDC assetId from get_balances' answer (the card's chain, where
        # the fixture funded the account; the account is on the L2 too).
        asset_ids = {
            balance["symbol"]: balance["assetId"]
            for balance in json.loads(balances.stdout)["balances"]
            if balance["account"] == account.address and balance["chainId"] == 31337
        }
        assert asset_ids["USDC"] == usdc_id()
        arguments = {"asset_id": asset_ids["USDC"], "amount": "1.5", "to": RECIPIENT}
        proposed = run_example(http.url, token.token, "transfer", json.dumps(arguments))
    assert proposed.returncode == 0, proposed.stderr
    answer = json.loads(proposed.stdout)
    action = Action.objects.get(pk=answer["action_id"])
    assert action.status == ActionStatus.PROPOSED
    assert action.user == user and action.smart_account == account.address
    assert answer["sign_url"].endswith(f"/sign/{action.pk}/")
    assert history_statuses(action) == ["proposed"]


SPEND_EXAMPLE = ROOT / "docs" / "examples" / "mcp_spend_permission.py"


@pytest.mark.chain
def test_the_spend_permission_example_walks_a_weekly_allowance(
    http_server,
    registered,  # noqa: F811 - the imported fixture
    user,
    application,
    make_token,
    monkeypatch,
):
    """docs/spend-permissions.md's walk: the example asks for 15 USDC a week and waits; the
    user signs the grant once (here the software passkey, in the browser in make run); three
    payments go with no prompt, the fourth is past what remains and gets a sign_url and why."""
    from picnic.celery import app as celery_app

    # No worker here: the submission the server queues after each signature runs in place.
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    passkey, account, w3 = registered
    mint(w3, "USDC", account.address, 20_000_000)
    token = make_token(user, application, scope="read:actions write:actions")
    with http_server() as http:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PICNIC_MCP_")}
        env |= {"PICNIC_MCP_URL": http.url, "PICNIC_MCP_TOKEN": token.token}
        walk = subprocess.Popen(
            [sys.executable, str(SPEND_EXAMPLE), usdc_id(), RECIPIENT, "--wait", "120"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            said = []
            while not (said and said[-1].startswith("open ")):
                line = walk.stderr.readline()
                assert line, f"the example ended early: {''.join(said)}"
                said.append(line)
            grant_id = said[-1].split("/sign/")[1].split("/")[0]
            assertion = json.dumps(
                passkey.get_json(bytes.fromhex(Action.objects.get(pk=grant_id).user_op_hash[2:]))
            )
            action_sign(action_id=grant_id, user=user, credential_json=assertion)
            out, err = walk.communicate(timeout=240)
        finally:
            walk.kill()
    said_all = "".join(said) + err
    assert walk.returncode == 0, said_all
    assert "may send up to 15 USDC per week to" in said[0]
    assert said_all.count("executed, signed by permission coffee") == 3
    answer = json.loads(out)
    [permission] = answer["permissions"]
    assert permission["status"] == "active" and permission["remaining"] == "1"
    assert sorted(spend["amount"] for spend in permission["spends"]) == ["4", "5", "5"]
    over = answer["over_the_allowance"]
    assert over["sign_url"] and over["permission_note"] == "over this week's remaining 1 USDC"
    assert Action.objects.get(pk=over["action_id"]).status == ActionStatus.PROPOSED
