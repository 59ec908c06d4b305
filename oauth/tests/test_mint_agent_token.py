"""`manage.py mint_agent_token`: a working agent token on a deployment with no demo data."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from oauth2_provider.models import AccessToken

pytestmark = pytest.mark.django_db


def mint(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("mint_agent_token", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_it_mints_a_bound_token_the_api_accepts(user, application, api_client, settings):
    settings.DEBUG = False  # any deployment, not only make run
    token, said = mint("--user", user.username, "--client", application.client_id)
    row = AccessToken.objects.get(token=token)
    assert (row.user, row.application) == (user, application)
    assert set(row.scope.split()) == set(settings.OAUTH2_PROVIDER["SCOPES"])
    assert row.resource == [settings.MCP_RESOURCE_URL]
    assert f"for {user.username} through {application.client_id}" in said
    # Authenticated and authorized: the action simply does not exist.
    answer = api_client.get(f"/api/v1/actions/{uuid.uuid4()}", token)
    assert answer.status_code == 404, answer.content


def test_it_mints_the_scopes_asked_for_only(user, application, api_client):
    token, _ = mint(
        "--user", user.username, "--client", application.client_id, "--scope", "read:card"
    )
    assert AccessToken.objects.get(token=token).scope == "read:card"
    answer = api_client.get(f"/api/v1/actions/{uuid.uuid4()}", token)
    assert answer.status_code == 403 and answer.json()["code"] == "insufficient_scope"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "nobody", "--client", "{client}"], "no active user 'nobody'"),
        (["--user", "{user}", "--client", "nope"], "no registered client 'nope'"),
        (["--user", "{user}", "--client", "{client}", "--scope", "root"], "unknown scope(s) root"),
        (["--user", "{user}", "--client", "{client}", "--days", "400"], "between 1 and 90"),
    ],
)
def test_it_refuses_what_it_cannot_mint_and_mints_nothing(user, application, args, message):
    filled = [a.format(user=user.username, client=application.client_id) for a in args]
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mint(*filled)
    assert not AccessToken.objects.exists()
