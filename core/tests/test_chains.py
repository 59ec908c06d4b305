"""The chain table: validated at load, looked up by id or CAIP-19, named in words."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from core import chains

ROW = {
    "id": 100,
    "name": "Gnosis",
    "rpc_url": "https://rpc.gnosischain.com",
    "bundler_url": "https://bundler.example/100",
    "explorer_url": "https://gnosisscan.io/{kind}/{value}",
    "native": {"symbol": "xDAI", "slip44": 700},
}


def test_it_parses_a_row_with_its_defaults():
    (chain,) = chains.parse_chains([ROW])
    assert chain.name == "Gnosis"
    assert chain.native.name == "xDAI" and chain.native.decimals == 18
    assert chain.caip2 == "eip155:100"
    assert chain.native_asset_id == "eip155:100/slip44:700"
    assert chain.explorer("tx", "0xabc") == "https://gnosisscan.io/tx/0xabc"
    assert chain.ens_registry == ""


@pytest.mark.parametrize(
    "change, message",
    [
        ({"id": 0}, "id must be a positive integer"),
        ({"id": True}, "id must be a positive integer"),
        ({"name": ""}, "name must be"),
        ({"rpc_url": "ftp://x"}, "rpc_url"),
        ({"native": {}}, "native must be"),
        ({"explorer_url": "https://x/{kind}"}, "must contain {value}"),
        ({"ens_registry": "0x12"}, "ens_registry"),
        ({"colour": "red"}, "unknown keys: colour"),
    ],
)
def test_it_refuses_a_bad_row_by_name(change, message):
    with pytest.raises(ImproperlyConfigured, match=message):
        chains.parse_chains([{**ROW, **change}])


def test_it_refuses_an_empty_table_and_a_repeated_id():
    with pytest.raises(ImproperlyConfigured, match="at least one"):
        chains.parse_chains([])
    with pytest.raises(ImproperlyConfigured, match="twice"):
        chains.parse_chains([ROW, ROW])


def test_it_has_two_local_chains_by_default_and_the_card_on_one_of_them(settings):
    ids = [chain.id for chain in chains.all_chains()]
    assert len(ids) == 2 and settings.CARD_CHAIN_ID in ids
    assert chains.card_chain().id == settings.CARD_CHAIN_ID


def test_it_finds_a_chain_by_id_or_asset_and_names_an_unknown_one(settings):
    settings.CHAINS = chains.parse_chains([ROW])
    assert chains.get_chain("100").name == "Gnosis"
    assert chains.chain_for_asset("eip155:100/erc20:0x" + "ab" * 20).id == 100
    assert chains.chain_name(100) == "Gnosis"
    assert chains.chain_name(5) == "chain 5"
    with pytest.raises(chains.UnknownChain):
        chains.get_chain(5)
    with pytest.raises(ValueError):
        chains.chain_for_asset("eip155:100")
