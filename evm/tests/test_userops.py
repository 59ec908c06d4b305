"""userOpHash against published vectors (viem's test suite) and the deployed EntryPoints."""

from __future__ import annotations

import pytest
from web3 import Web3

from chain import contracts
from evm.userops import UserOpError, pack_v07, user_op_hash

ADDR = "0x1234567890123456789012345678901234567890"
EP08 = "0x4337084D9E255Ff0702461CF8895CE9E3b5Ff108"
BASE = {
    "sender": ADDR,
    "nonce": 0,
    "callData": "0x",
    "callGasLimit": 6942069,
    "verificationGasLimit": 6942069,
    "preVerificationGas": 6942069,
    "maxFeePerGas": 69420,
    "maxPriorityFeePerGas": 69,
    "signature": "0x",
}
PAYMASTER = {"paymaster": ADDR}
PM_VGL = {**PAYMASTER, "paymasterVerificationGasLimit": 6942069}
PM_POST = {**PM_VGL, "paymasterPostOpGasLimit": 6942069}
PM_DATA = {**PM_POST, "paymasterData": "0xdeadbeef"}
FACTORY = {"factory": ADDR, "factoryData": "0xdeadbeef"}

VECTORS = [
    ("0.7", ADDR, {}, "0x1903d62bb5dc75af6fed866aa46d8e80063d9e288aa7f2caad0ff1fcae22e40d"),
    ("0.7", ADDR, FACTORY, "0x46c1d51e831d50c1a93135f026a7d3f1921ed66e9c81da723dd3817a49f01bc1"),
    ("0.7", ADDR, PAYMASTER, "0x1f2cf8638ead0fc621c6fb1562b8222c06539efcec09be156191f72418ebb109"),
    ("0.7", ADDR, PM_VGL, "0x950763d3ef84eb05b6cd1d95f3b736bb02988d643c6e11a76bf8beddc611cc95"),
    ("0.7", ADDR, PM_POST, "0xd6efc63c28df53b49dd6fa10cec0a92ac61f8c70e9a45265e39c955f9bf821ed"),
    ("0.7", ADDR, PM_DATA, "0x265fc1350b3fc016d493f9533354cf1a758c0fb9ddbbfd8b19c987d4e8935eed"),
    ("0.8", EP08, {}, "0xa2224e732a1d4e2f923c7c05d586a0aa6cbc42172ec02f31d35fa9a2b8ba9208"),
    ("0.8", EP08, FACTORY, "0x3146c70a9ef7538e9b9aca8b00ad4b127ca7eef7817a557f1801acbf8d68c206"),
    ("0.8", EP08, PAYMASTER, "0x364bff8f9104a3854dce4f61f8479ce3019a3bd23e1c8db4da0d7c22850835b9"),
    ("0.8", EP08, PM_VGL, "0x9cb735eb4278caf0a9f53ad81e5f592e965c9d034f6e2780befa4cd09a990b04"),
    ("0.8", EP08, PM_POST, "0x745602113988c3a6f18215d96eecc85775998dcb190e374a0955e637d40fe018"),
    ("0.8", EP08, PM_DATA, "0xf10ef9afcf27a4fd17e477cd19f37e588e3ff7d48eade07ab5b7eb8caf75667f"),
    ("0.6", ADDR, {}, "0xe331591ab320e956b5e93f04e1dcf706bc128bc7b510602d2e0553f8be25fcba"),
    (
        "0.6",
        ADDR,
        {"initCode": ADDR + "deadbeef"},
        "0xaa4a4fa863b3018e0e23291ca82a8747d06c6a92548eb9198f54f4a63540d06e",
    ),
    (
        "0.6",
        ADDR,
        {"paymasterAndData": ADDR},
        "0x72bb2d82af9e9da2079fab165bc219c967c6ca0a63dfa55f382c5914ba2f77c5",
    ),
]


@pytest.mark.parametrize(("version", "entry_point", "extra", "expected"), VECTORS)
def test_it_matches_published_vectors(version, entry_point, extra, expected):
    op = {**BASE, **extra}
    assert user_op_hash(op, entry_point=entry_point, chain_id=1, version=version) == expected


def test_it_accepts_hex_quantities_and_checksummed_addresses():
    as_hex = {k: hex(v) if isinstance(v, int) else v for k, v in BASE.items()}
    as_hex["sender"] = Web3.to_checksum_address(ADDR)
    for version, ep in (("0.6", ADDR), ("0.7", ADDR), ("0.8", EP08)):
        assert user_op_hash(as_hex, entry_point=ep, chain_id=1, version=version) == user_op_hash(
            BASE, entry_point=ep, chain_id=1, version=version
        )


def test_it_ignores_the_signature():
    signed = {**BASE, "signature": "0x" + "11" * 65}
    assert user_op_hash(signed, entry_point=ADDR, chain_id=1, version="0.7") == VECTORS[0][3]


def test_the_chain_id_changes_the_hash():
    assert user_op_hash(BASE, entry_point=ADDR, chain_id=31337, version="0.7") != VECTORS[0][3]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sender": "0x1234"}, "sender"),
        ({"nonce": None}, "nonce"),
        ({"callGasLimit": "12"}, "callGasLimit"),
        ({"callGasLimit": "0xzz"}, "callGasLimit"),
        ({"maxFeePerGas": -1}, "maxFeePerGas"),
        ({"callData": "deadbeef"}, "callData"),
        ({"callGasLimit": 2**128}, "128 bits"),
    ],
)
def test_it_rejects_malformed_fields(change, message):
    with pytest.raises(UserOpError, match=message):
        user_op_hash({**BASE, **change}, entry_point=ADDR, chain_id=1, version="0.7")


def test_it_rejects_unknown_versions():
    with pytest.raises(UserOpError, match="unsupported EntryPoint version"):
        user_op_hash(BASE, entry_point=ADDR, chain_id=1, version="0.9")


@pytest.mark.chain
@pytest.mark.parametrize("version", ["0.7", "0.8"])
@pytest.mark.parametrize("extra", [{}, FACTORY, PM_DATA, {**FACTORY, **PM_DATA}])
def test_it_matches_entry_point_get_user_op_hash_on_chain(chain, version, extra):
    w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
    ep = contracts.ENTRY_POINTS[version]["address"]
    entry_point = w3.eth.contract(address=ep, abi=contracts.artifact(version, "EntryPoint")["abi"])
    op = {**BASE, **extra, "nonce": 7, "callData": "0xb61d27f6"}
    packed = pack_v07(op)
    on_chain = entry_point.functions.getUserOpHash(
        (
            Web3.to_checksum_address(op["sender"]),
            packed["nonce"],
            packed["initCode"],
            packed["callData"],
            packed["accountGasLimits"],
            packed["preVerificationGas"],
            packed["gasFees"],
            packed["paymasterAndData"],
            packed["signature"],
        )
    ).call()
    ours = user_op_hash(op, entry_point=ep, chain_id=w3.eth.chain_id, version=version)
    assert ours == "0x" + on_chain.hex().removeprefix("0x")
