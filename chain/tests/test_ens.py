"""ENS on the local chain: the registry, public resolver and reverse registrar the stack deploys
from the npm packages' bytecode, read through web3.py's ENS module and through evm.ens."""

from __future__ import annotations

import uuid

import pytest
from eth_utils import keccak
from web3 import Web3

from chain import ens as local_ens
from chain.dev import fund
from evm.ens import EnsNameNotFound, EnsReader, EnsUnavailable, namehash, reverse_name

pytestmark = pytest.mark.chain


@pytest.fixture
def w3(chain):
    return Web3(Web3.HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


def _label() -> str:
    return "t" + uuid.uuid4().hex[:12]  # the session's chain is shared: a fresh name each test


def _eoa(w3) -> tuple[str, str]:
    key = "0x" + keccak(text=_label()).hex()
    address = w3.eth.account.from_key(key).address
    fund(w3, address, 10**18)
    return key, address


def _forward_with_web3(w3, name: str) -> str:
    registry = w3.eth.contract(
        address=local_ens.registry_address(), abi=local_ens.artifact("ENSRegistry")["abi"]
    )
    resolver = w3.eth.contract(
        address=registry.functions.resolver(namehash(name)).call(),
        abi=local_ens.artifact("PublicResolver")["abi"],
    )
    return resolver.functions.addr(namehash(name)).call()


def test_the_registry_lands_at_its_constant_address_and_holds_the_names(chain, w3):
    # (That settings.CHAINS names this address: actions/tests/test_ens_transfer.py.)
    registry = local_ens.registry_address()
    assert registry == "0x7C5ca0BD4883D5970C5f52E7DE58e7Fa4Aa94EC4"
    ens = w3.eth.contract(address=registry, abi=local_ens.artifact("ENSRegistry")["abi"])
    assert ens.functions.owner(b"\0" * 32).call() == local_ens.ENS_OWNER
    assert ens.functions.owner(namehash("eth")).call() == local_ens.ENS_OWNER
    assert (
        ens.functions.owner(namehash("addr.reverse")).call()
        == local_ens.reverse_registrar_address()
    )
    # Deploying again changes nothing (make run re-runs it on a live chain).
    deployed = local_ens.deploy(chain.rpc_url, chain.create2)
    assert deployed["ensRegistry"] == registry
    assert deployed["ensPublicResolver"] == local_ens.resolver_address()


def test_a_name_resolves_through_web3s_ens_module_and_evm_ens(w3):
    name = f"{_label()}.eth"
    _key, target = _eoa(w3)
    local_ens.register(w3, name, target)
    # The EIP-137 path with web3.py's contracts: registry.resolver, then resolver.addr.
    # (web3.py 7's ENS module asks mainnet's Universal Resolver, which no package here ships.)
    assert _forward_with_web3(w3, name) == target
    reader = EnsReader(w3, local_ens.registry_address())
    assert reader.resolve(name) == target
    # Re-pointing the name is seen at once (nothing cached but the resolver's address).
    _key, other = _eoa(w3)
    local_ens.register(w3, name, other)
    assert reader.resolve(name) == other


def test_resolution_is_one_batched_round_trip_once_the_resolver_is_known(w3):
    name = f"{_label()}.eth"
    _key, target = _eoa(w3)
    local_ens.register(w3, name, target)
    EnsReader._last_resolver.clear()
    first = EnsReader(w3, local_ens.registry_address())
    assert first.resolve(name) == target and first.round_trips == 2  # learns the resolver
    second = EnsReader(w3, local_ens.registry_address())
    assert second.resolve(name) == target and second.round_trips == 1


def test_unknown_and_zero_address_names_are_not_found(w3):
    reader = EnsReader(w3, local_ens.registry_address())
    with pytest.raises(EnsNameNotFound):
        reader.resolve(f"{_label()}.eth")  # no resolver
    zero = f"{_label()}.eth"
    local_ens.register(w3, zero, "0x" + "00" * 20)
    with pytest.raises(EnsNameNotFound):
        reader.resolve(zero)


def test_a_registry_address_without_code_is_named(w3):
    with pytest.raises(EnsUnavailable, match="no ENS registry at 0x1111"):
        EnsReader(w3, "0x" + "11" * 20).resolve("merchant.eth")


def test_a_reverse_record_is_shown_only_when_its_name_points_back(w3):
    reader = EnsReader(w3, local_ens.registry_address())
    name = f"{_label()}.eth"
    key, address = _eoa(w3)
    local_ens.register(w3, name, address)
    local_ens.set_reverse_name_of_eoa(w3, key, name)
    assert reader.reverse_name(address) == name
    resolver = w3.eth.contract(
        address=local_ens.resolver_address(), abi=local_ens.artifact("PublicResolver")["abi"]
    )
    assert resolver.functions.name(namehash(reverse_name(address))).call() == name
    # An address claiming a name that points elsewhere: the forward check fails, no name.
    liar_key, liar = _eoa(w3)
    local_ens.set_reverse_name_of_eoa(w3, liar_key, name)
    assert reader.reverse_name(liar) is None
    # No reverse record at all.
    _key, nobody = _eoa(w3)
    assert reader.reverse_name(nobody) is None


def test_a_simple_account_sets_its_reverse_record_through_its_owner(w3):
    from chain.simple_account import SimpleAccountOwner

    owner_key = "0x" + keccak(text=_label()).hex()
    account = SimpleAccountOwner(w3, owner_key=owner_key, version="0.7")
    w3.eth.wait_for_transaction_receipt(
        account.factory.functions.createAccount(account.owner.address, 0).transact(
            {"from": w3.eth.accounts[0]}
        )
    )
    name = f"{_label()}.eth"
    local_ens.register(w3, name, account.address)
    local_ens.set_reverse_name_of_simple_account(w3, owner_key, account.address, name)
    assert EnsReader(w3, local_ens.registry_address()).reverse_name(account.address) == name
