"""ENS on the local chain: the EIP-137 registry, the public resolver and the EIP-181 reverse
registrar, from the bytecode the published npm packages ship (Truffle build artifacts of
`@ensdomains/ens@0.6.2`: ENSRegistry, ReverseRegistrar; `@ensdomains/resolver@0.3.1`:
PublicResolver), deployed through the CREATE2 deployer so the addresses are constants
(settings.CHAINS names the registry), plus the demo names `make run` registers.

Dev chains only: the root and `.eth` are held by Hardhat's dev account #0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any

from eth_abi import encode
from eth_utils import keccak, to_bytes, to_checksum_address
from web3 import Web3

from chain import contracts
from evm.ens import namehash, reverse_name

ENS_SALT = "0x" + "00" * 31 + "0f"
# Who holds the root, `eth` and `reverse` on the dev chain (Hardhat dev account #0, unlocked).
ENS_OWNER = contracts.DEMO_TOKEN_OWNER
# The merchant of the demo: an EOA of its own (derived, not a Hardhat dev account other helpers
# may use), so it can set its own reverse record.
MERCHANT_KEY = "0x" + keccak(text="picnic demo merchant").hex()

_ARTIFACTS = {
    "ENSRegistry": contracts.NODE_MODULES / "@ensdomains/ens/build/contracts/ENSRegistry.json",
    "ReverseRegistrar": contracts.NODE_MODULES
    / "@ensdomains/ens/build/contracts/ReverseRegistrar.json",
    "PublicResolver": contracts.NODE_MODULES
    / "@ensdomains/resolver/build/contracts/PublicResolver.json",
}


@cache
def artifact(name: str) -> dict[str, Any]:
    path = _ARTIFACTS[name]
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: install the chain stack's npm packages (make deps)"
        )
    return json.loads(path.read_text())


def registry_initcode() -> bytes:
    return to_bytes(hexstr=artifact("ENSRegistry")["bytecode"])


def registry_address() -> str:
    return contracts.create2_address(ENS_SALT, registry_initcode())


def resolver_initcode() -> bytes:
    return to_bytes(hexstr=artifact("PublicResolver")["bytecode"]) + encode(
        ["address"], [registry_address()]
    )


def resolver_address() -> str:
    return contracts.create2_address(ENS_SALT, resolver_initcode())


def reverse_registrar_initcode() -> bytes:
    return to_bytes(hexstr=artifact("ReverseRegistrar")["bytecode"]) + encode(
        ["address", "address"], [registry_address(), resolver_address()]
    )


def reverse_registrar_address() -> str:
    return contracts.create2_address(ENS_SALT, reverse_registrar_initcode())


def _contract(w3: Web3, name: str, address: str):
    return w3.eth.contract(address=address, abi=artifact(name)["abi"])


def _send(w3: Web3, fn, sender: str) -> None:
    receipt = w3.eth.wait_for_transaction_receipt(fn.transact({"from": sender}), timeout=30)
    if receipt["status"] != 1:
        raise RuntimeError(f"ENS set-up transaction {receipt['transactionHash'].hex()} reverted")


def _send_signed(w3: Web3, call, signer, what: str) -> None:
    """Send `call` signed by the local account `signer` (an EOA whose key we hold: the node does
    not know it) and wait for it; RuntimeError naming `what` if it reverts."""
    tx = call.build_transaction(
        {
            "from": signer.address,
            "nonce": w3.eth.get_transaction_count(signer.address, "pending"),
            "chainId": w3.eth.chain_id,
        }
    )
    receipt = w3.eth.wait_for_transaction_receipt(
        w3.eth.send_raw_transaction(signer.sign_transaction(tx).raw_transaction), timeout=30
    )
    if receipt["status"] != 1:
        raise RuntimeError(f"{what} reverted")


def _fund(w3: Web3, address: str) -> None:
    """Gas money from ENS_OWNER (unlocked on the dev node) for an EOA that sets its own record."""
    w3.eth.wait_for_transaction_receipt(
        w3.eth.send_transaction({"from": ENS_OWNER, "to": address, "value": 10**18}), timeout=30
    )


def deploy(rpc_url: str, create2: Callable[[str, bytes], str]) -> dict[str, str]:
    """Registry, public resolver and reverse registrar (idempotent), the root handed to
    ENS_OWNER, `eth` owned by it and `addr.reverse` owned by the reverse registrar."""
    registry = create2(ENS_SALT, registry_initcode())
    resolver = create2(ENS_SALT, resolver_initcode())
    reverse = create2(ENS_SALT, reverse_registrar_initcode())
    w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 10}))
    ens = _contract(w3, "ENSRegistry", registry)
    root = ens.functions.owner(b"\0" * 32).call()
    if root == contracts.CREATE2_DEPLOYER:
        # The registry's constructor gives the root to msg.sender, here the CREATE2 deployer
        # (which cannot call anything): on the dev node it hands the root over, impersonated.
        w3.provider.make_request("hardhat_impersonateAccount", [contracts.CREATE2_DEPLOYER])
        w3.provider.make_request("hardhat_setBalance", [contracts.CREATE2_DEPLOYER, hex(10**18)])
        try:
            _send(w3, ens.functions.setOwner(b"\0" * 32, ENS_OWNER), contracts.CREATE2_DEPLOYER)
        finally:
            w3.provider.make_request(
                "hardhat_stopImpersonatingAccount", [contracts.CREATE2_DEPLOYER]
            )
    _ensure_subnode(w3, ens, "eth", ENS_OWNER)
    _ensure_subnode(w3, ens, "reverse", ENS_OWNER)
    _ensure_subnode(w3, ens, "addr.reverse", reverse)
    return {"ensRegistry": registry, "ensPublicResolver": resolver, "ensReverseRegistrar": reverse}


def _ensure_subnode(w3: Web3, ens, name: str, owner: str) -> None:
    label, _, parent = name.partition(".")
    if ens.functions.owner(namehash(name)).call() != owner:
        _send(
            w3,
            ens.functions.setSubnodeOwner(namehash(parent), keccak(text=label), owner),
            ENS_OWNER,
        )


def register(w3: Web3, name: str, address: str) -> None:
    """Point `name` (a label under a name ENS_OWNER holds, e.g. `alice.eth`) at `address`
    through the public resolver. The name stays ENS_OWNER's (so the demo can re-point it)."""
    label, _, parent = name.partition(".")
    ens = _contract(w3, "ENSRegistry", registry_address())
    resolver = _contract(w3, "PublicResolver", resolver_address())
    node = namehash(name)
    if (
        ens.functions.owner(node).call() != ENS_OWNER
        or ens.functions.resolver(node).call() != resolver.address
    ):
        _send(
            w3,
            ens.functions.setSubnodeRecord(
                namehash(parent), keccak(text=label), ENS_OWNER, resolver.address, 0
            ),
            ENS_OWNER,
        )
    target = to_checksum_address(address)
    if resolver.functions.addr(node).call() != target:
        _send(w3, resolver.functions.setAddr(node, target), ENS_OWNER)


def set_reverse_name_of_eoa(w3: Web3, key: str, name: str) -> str:
    """The EIP-181 reverse record of the EOA of `key`: only an address itself can set it, so the
    EOA sends ReverseRegistrar.setName (funded first from dev account #0 when needed)."""
    account = w3.eth.account.from_key(key)
    registrar = _contract(w3, "ReverseRegistrar", reverse_registrar_address())
    resolver = _contract(w3, "PublicResolver", resolver_address())
    if resolver.functions.name(namehash(reverse_name(account.address))).call() == name:
        return account.address
    if w3.eth.get_balance(account.address) < 10**17:
        _fund(w3, account.address)
    _send_signed(
        w3, registrar.functions.setName(name), account, f"setName({name!r}) from {account.address}"
    )
    return account.address


def set_reverse_name_of_simple_account(w3: Web3, owner_key: str, account: str, name: str) -> None:
    """The reverse record of a SimpleAccount: its owner EOA calls the account's execute()
    directly (SimpleAccount allows its owner), so msg.sender at the registrar is the account."""
    resolver = _contract(w3, "PublicResolver", resolver_address())
    if resolver.functions.name(namehash(reverse_name(account))).call() == name:
        return
    owner = w3.eth.account.from_key(owner_key)
    if w3.eth.get_balance(owner.address) < 10**17:
        _fund(w3, owner.address)
    registrar = _contract(w3, "ReverseRegistrar", reverse_registrar_address())
    call = registrar.encode_abi("setName", [name])
    execute = w3.eth.contract(
        address=to_checksum_address(account),
        abi=[
            {
                "type": "function",
                "name": "execute",
                "stateMutability": "nonpayable",
                "inputs": [
                    {"name": "dest", "type": "address"},
                    {"name": "value", "type": "uint256"},
                    {"name": "func", "type": "bytes"},
                ],
                "outputs": [],
            }
        ],
    ).functions.execute(registrar.address, 0, to_bytes(hexstr=call))
    _send_signed(w3, execute, owner, f"setName({name!r}) through {account}")
