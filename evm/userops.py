"""ERC-4337 user operations: packing and the userOpHash, per EntryPoint version.

The hash is what the account owner signs and what the bundler reports back, so it has to be
bit-for-bit what `EntryPoint.getUserOpHash` returns (tests check both published vectors and
the deployed EntryPoints on the local chain).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eth_abi import encode
from eth_utils import is_hex_address, keccak, to_bytes

VERSIONS = ("0.6", "0.7", "0.8")

# keccak256("PackedUserOperation(address sender,uint256 nonce,bytes initCode,bytes callData,
#   bytes32 accountGasLimits,uint256 preVerificationGas,bytes32 gasFees,bytes paymasterAndData)")
_PACKED_USEROP_TYPEHASH = keccak(
    b"PackedUserOperation(address sender,uint256 nonce,bytes initCode,bytes callData,"
    b"bytes32 accountGasLimits,uint256 preVerificationGas,bytes32 gasFees,bytes paymasterAndData)"
)
_EIP712_DOMAIN_TYPEHASH = keccak(
    b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)


class UserOpError(ValueError):
    """A user operation that cannot be packed (missing or malformed field)."""


def _int(op: Mapping[str, Any], name: str, *, required: bool = True) -> int:
    value = op.get(name)
    if value is None or value == "":
        if required:
            raise UserOpError(f"user operation field {name!r} is required")
        return 0
    if isinstance(value, bool):
        raise UserOpError(f"user operation field {name!r} must be an integer")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str) and value.startswith(("0x", "0X")):
        try:
            result = int(value, 16) if len(value) > 2 else 0
        except ValueError:
            raise UserOpError(
                f"user operation field {name!r} is not valid hex: {value!r}"
            ) from None
    else:
        raise UserOpError(f"user operation field {name!r} must be an int or 0x-hex string")
    if result < 0:
        raise UserOpError(f"user operation field {name!r} must not be negative")
    return result


def _bytes(op: Mapping[str, Any], name: str) -> bytes:
    value = op.get(name)
    if value is None or value == "" or value == "0x":
        return b""
    if not isinstance(value, str) or not value.startswith(("0x", "0X")):
        raise UserOpError(f"user operation field {name!r} must be a 0x-hex string")
    try:
        return to_bytes(hexstr=value)
    except ValueError:
        raise UserOpError(f"user operation field {name!r} is not valid hex: {value!r}") from None


def _address(value: Any, name: str) -> bytes:
    if not isinstance(value, str) or not is_hex_address(value):
        raise UserOpError(f"{name} must be a 20-byte 0x address, got {value!r}")
    return to_bytes(hexstr=value)


def _uint128_pair(high: int, low: int) -> bytes:
    for v in (high, low):
        if v >= 2**128:
            raise UserOpError("gas values must fit in 128 bits")
    return high.to_bytes(16, "big") + low.to_bytes(16, "big")


def init_code(op: Mapping[str, Any]) -> bytes:
    """v0.7+: factory + factoryData, or empty when the account already exists."""
    if not op.get("factory"):
        return b""
    return _address(op["factory"], "factory") + _bytes(op, "factoryData")


def paymaster_and_data(op: Mapping[str, Any]) -> bytes:
    """v0.7+: paymaster ‖ uint128 verificationGas ‖ uint128 postOpGas ‖ paymasterData."""
    if not op.get("paymaster"):
        return b""
    return (
        _address(op["paymaster"], "paymaster")
        + _uint128_pair(
            _int(op, "paymasterVerificationGasLimit", required=False),
            _int(op, "paymasterPostOpGasLimit", required=False),
        )
        + _bytes(op, "paymasterData")
    )


def pack_v07(op: Mapping[str, Any]) -> dict[str, Any]:
    """The PackedUserOperation struct (v0.7/v0.8) as the EntryPoint ABI expects it."""
    return {
        "sender": _address(op.get("sender"), "sender"),
        "nonce": _int(op, "nonce"),
        "initCode": init_code(op),
        "callData": _bytes(op, "callData"),
        "accountGasLimits": _uint128_pair(
            _int(op, "verificationGasLimit"), _int(op, "callGasLimit")
        ),
        "preVerificationGas": _int(op, "preVerificationGas"),
        "gasFees": _uint128_pair(_int(op, "maxPriorityFeePerGas"), _int(op, "maxFeePerGas")),
        "paymasterAndData": paymaster_and_data(op),
        "signature": _bytes(op, "signature"),
    }


def _hash_v06(op: Mapping[str, Any], entry_point: bytes, chain_id: int) -> bytes:
    packed = encode(
        ["address", "uint256", "bytes32", "bytes32"] + ["uint256"] * 5 + ["bytes32"],
        [
            _address(op.get("sender"), "sender"),
            _int(op, "nonce"),
            keccak(_bytes(op, "initCode")),
            keccak(_bytes(op, "callData")),
            _int(op, "callGasLimit"),
            _int(op, "verificationGasLimit"),
            _int(op, "preVerificationGas"),
            _int(op, "maxFeePerGas"),
            _int(op, "maxPriorityFeePerGas"),
            keccak(_bytes(op, "paymasterAndData")),
        ],
    )
    return keccak(
        encode(["bytes32", "address", "uint256"], [keccak(packed), entry_point, chain_id])
    )


def _packed_fields_v07(p: dict[str, Any]) -> tuple[list[str], list[Any]]:
    return (
        ["address", "uint256", "bytes32", "bytes32", "bytes32", "uint256", "bytes32", "bytes32"],
        [
            p["sender"],
            p["nonce"],
            keccak(p["initCode"]),
            keccak(p["callData"]),
            p["accountGasLimits"],
            p["preVerificationGas"],
            p["gasFees"],
            keccak(p["paymasterAndData"]),
        ],
    )


def _hash_v07(op: Mapping[str, Any], entry_point: bytes, chain_id: int) -> bytes:
    types, values = _packed_fields_v07(pack_v07(op))
    packed = encode(types, values)
    return keccak(
        encode(["bytes32", "address", "uint256"], [keccak(packed), entry_point, chain_id])
    )


def _hash_v08(op: Mapping[str, Any], entry_point: bytes, chain_id: int) -> bytes:
    # EIP-712 typed data, domain ("ERC4337", "1", chainId, entryPoint).
    # Not handled: EIP-7702 initCode markers (factory 0x7702), which need the account's code.
    types, values = _packed_fields_v07(pack_v07(op))
    struct_hash = keccak(encode(["bytes32", *types], [_PACKED_USEROP_TYPEHASH, *values]))
    domain = keccak(
        encode(
            ["bytes32", "bytes32", "bytes32", "uint256", "address"],
            [_EIP712_DOMAIN_TYPEHASH, keccak(b"ERC4337"), keccak(b"1"), chain_id, entry_point],
        )
    )
    return keccak(b"\x19\x01" + domain + struct_hash)


def user_op_hash(
    user_op: Mapping[str, Any], *, entry_point: str, chain_id: int, version: str
) -> str:
    """The ERC-4337 userOpHash as 0x-prefixed lowercase hex.

    `user_op` uses the field names of `eth_sendUserOperation` for that version; integers may be
    ints or 0x-hex strings; absent optional fields mean empty.
    """
    ep = _address(entry_point, "entry_point")
    if version == "0.6":
        digest = _hash_v06(user_op, ep, chain_id)
    elif version == "0.7":
        digest = _hash_v07(user_op, ep, chain_id)
    elif version == "0.8":
        digest = _hash_v08(user_op, ep, chain_id)
    else:
        raise UserOpError(f"unsupported EntryPoint version {version!r}; expected one of {VERSIONS}")
    return "0x" + digest.hex()


def to_rpc(user_op: Mapping[str, Any]) -> dict[str, Any]:
    """A v0.7/v0.8 user operation in the bundler's wire format (quantities as 0x-hex)."""
    quantities = {
        "nonce",
        "callGasLimit",
        "verificationGasLimit",
        "preVerificationGas",
        "maxFeePerGas",
        "maxPriorityFeePerGas",
        "paymasterVerificationGasLimit",
        "paymasterPostOpGasLimit",
    }
    out: dict[str, Any] = {}
    for key, value in user_op.items():
        if value is None:
            continue
        out[key] = hex(_int(user_op, key)) if key in quantities else value
    return out


# Canonical EntryPoint deployments (same address on every chain, via CREATE2).
ENTRY_POINT_ADDRESSES = {
    "0.6": "0x5FF137D4b0FDCD49DcA30c7CF57E578a026d2789",
    "0.7": "0x0000000071727De22E5E9d8BAf0edAc6f37da032",
    "0.8": "0x4337084D9E255Ff0702461CF8895CE9E3b5Ff108",
}


def entry_point_address(version: str) -> str:
    try:
        return ENTRY_POINT_ADDRESSES[version]
    except KeyError:
        raise UserOpError(f"unsupported EntryPoint version {version!r}") from None
