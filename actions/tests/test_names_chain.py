"""The summary an agent reads (get_action_status) names the chain from the chain table, not
its id. On the real local chain: the transfer tool builds the summary at proposal."""

from __future__ import annotations

import dataclasses

import pytest

from actions.execution.models import Action

from .test_signing import RECIPIENT, transfer

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.mark.parametrize("name", ["Gnosis (local)", "Chiado, renamed in the table"])
def test_the_summary_names_the_chain_from_the_table(
    registered, api_client, write_token, settings, name
):
    card_chain, *others = settings.CHAINS
    settings.CHAINS = (dataclasses.replace(card_chain, name=name), *others)
    created = transfer(api_client, write_token)
    assert created.status_code == 201, created.content
    action_id = created.json()["action_id"]
    status = api_client.get(f"/api/v1/actions/{action_id}", write_token)
    assert status.status_code == 200, status.content
    summary = status.json()["summary"]
    assert summary == f"Send 1.5 USDC to {RECIPIENT} on {name}"
    assert str(card_chain.id) not in summary
    assert Action.objects.get(pk=action_id).summary == summary
