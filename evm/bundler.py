"""ERC-4337 bundler JSON-RPC (ERC-7769) through web3.py, with bounded timeouts.

Every failure mode of the remote side (refused, slow, HTTP error, non-JSON, a JSON-RPC error,
a result of the wrong shape) surfaces as a BundlerError subclass, never as a hang or a
library-specific exception, so callers can be best-effort with one `except`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests
from eth_abi import decode
from eth_abi.exceptions import DecodingError
from web3 import Web3
from web3.exceptions import Web3Exception

from evm.rpc import http_web3

_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
_ERROR_SELECTOR = bytes.fromhex("08c379a0")  # Error(string)
_PANIC_SELECTOR = bytes.fromhex("4e487b71")  # Panic(uint256)
# Custom errors worth naming for staff and users (OpenZeppelin ERC-20).
_CUSTOM_ERRORS = {
    bytes.fromhex("e450d38c"): ("ERC20InsufficientBalance", ["address", "uint256", "uint256"]),
    bytes.fromhex("fb8f41b2"): ("ERC20InsufficientAllowance", ["address", "uint256", "uint256"]),
    bytes.fromhex("ec442f05"): ("ERC20InvalidReceiver", ["address"]),
}


class BundlerError(Exception):
    """The bundler answered with a JSON-RPC error (e.g. -32500 AAxx validation)."""

    def __init__(self, message: str, *, code: int | None = None, data: Any = None):
        self.code = code
        self.data = data
        super().__init__(message)


class BundlerUnavailable(BundlerError):
    """No usable answer: refused, timed out, HTTP error, malformed response."""


# ERC-7769 codes of an `eth_sendUserOperation` refusal that no later attempt can overturn for
# this signed op: invalid fields, validation reverted (AAxx), paymaster validation, banned
# opcode, outside validUntil/validAfter, throttled or banned entity, stake too low, signature
# check failed, paymaster balance. Changing the op would need a new signature.
FINAL_SUBMISSION_CODES = frozenset(
    {-32602, -32500, -32501, -32502, -32503, -32504, -32505, -32507, -32508}
)


class SendVerdict(enum.StrEnum):
    KNOWN = "known"  # the bundler already holds this very op (an earlier send got through)
    FINAL = "final"  # refused for good: the action fails
    TRANSIENT = "transient"  # try the same signed op again later


def classify_send_error(exc: BundlerError) -> SendVerdict:
    """What an `eth_sendUserOperation` error means for the signed op we sent."""
    if isinstance(exc, BundlerUnavailable):
        return SendVerdict.TRANSIENT
    message = str(exc).lower()
    # Alto answers -32602 "Already known" for an op it holds (a lost answer, then a re-send).
    if "already known" in message:
        return SendVerdict.KNOWN
    # Another op with our nonce waits in the mempool: ours may still go if that one is dropped;
    # if it is included, the nonce check in reconciliation ends ours as dropped.
    if "already being processed" in message or "already present in mempool" in message:
        return SendVerdict.TRANSIENT
    if exc.code in FINAL_SUBMISSION_CODES:
        return SendVerdict.FINAL
    return SendVerdict.TRANSIENT


@dataclass(frozen=True)
class UserOpReceipt:
    success: bool
    tx_hash: str
    block_number: int
    reason: str | None
    raw: dict[str, Any]


def decode_revert_reason(data: str | None) -> str:
    """A readable revert reason from revert data (Error(string), Panic(uint256) or raw hex)."""
    if not data or data in ("0x", "0x0"):
        return "execution reverted"
    if not isinstance(data, str) or not data.startswith("0x"):
        return str(data)
    try:
        raw = bytes.fromhex(data[2:])
    except ValueError:
        return data
    try:
        if raw[:4] == _ERROR_SELECTOR:
            return decode(["string"], raw[4:])[0]
        if raw[:4] == _PANIC_SELECTOR:
            return f"panic 0x{decode(['uint256'], raw[4:])[0]:02x}"
        if raw[:4] in _CUSTOM_ERRORS:
            name, types = _CUSTOM_ERRORS[raw[:4]]
            args = ", ".join(str(a) for a in decode(types, raw[4:]))
            return f"{name}({args})"
    except (DecodingError, UnicodeDecodeError, OverflowError):  # shown raw below
        pass
    return f"execution reverted (revert data {data})"


def _quantity(value: Any, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and re.fullmatch(r"0x[0-9a-fA-F]+", value):
        return int(value, 16)
    raise BundlerUnavailable(f"malformed receipt: {name}={value!r}")


def parse_receipt(result: Any) -> UserOpReceipt | None:
    """`eth_getUserOperationReceipt` result → UserOpReceipt; None while pending."""
    if result is None:
        return None
    if not isinstance(result, dict):
        raise BundlerUnavailable(
            f"malformed receipt: expected an object, got {type(result).__name__}"
        )
    success = result.get("success")
    receipt = result.get("receipt")
    if not isinstance(success, bool) or not isinstance(receipt, dict):
        raise BundlerUnavailable("malformed receipt: missing success or receipt")
    tx_hash = receipt.get("transactionHash")
    if not isinstance(tx_hash, str) or not _HASH.match(tx_hash):
        raise BundlerUnavailable(f"malformed receipt: transactionHash={tx_hash!r}")
    block_number = _quantity(receipt.get("blockNumber"), "blockNumber")
    reason = None if success else decode_revert_reason(result.get("reason"))
    return UserOpReceipt(success, tx_hash.lower(), block_number, reason, result)


class BundlerClient:
    def __init__(
        self, url: str, *, timeout: float, headers: Callable[[], dict[str, str]] | None = None
    ):
        self.url = url
        self.timeout = timeout
        # No silent retries: the timeout above must bound the whole call.
        self.w3 = http_web3(self.url, timeout=self.timeout, headers=headers or dict)

    def call(self, method: str, params: list[Any]) -> Any:
        try:
            response = self.w3.provider.make_request(method, params)
        except (requests.RequestException, ValueError, Web3Exception, OSError) as exc:
            raise BundlerUnavailable(
                f"{method} to {self.url}: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(response, dict):
            raise BundlerUnavailable(f"{method}: malformed JSON-RPC response")
        error = response.get("error")
        if error is not None:
            if isinstance(error, dict):
                raise BundlerError(
                    str(error.get("message") or error),
                    code=error.get("code"),
                    data=error.get("data"),
                )
            raise BundlerError(str(error))
        if "result" not in response:
            raise BundlerUnavailable(f"{method}: JSON-RPC response without result")
        return response["result"]

    def supported_entry_points(self) -> list[str]:
        return self.call("eth_supportedEntryPoints", [])

    def get_user_operation_receipt(self, user_op_hash: str) -> UserOpReceipt | None:
        return parse_receipt(self.call("eth_getUserOperationReceipt", [user_op_hash]))

    def get_user_operation_by_hash(self, user_op_hash: str) -> dict[str, Any] | None:
        return self.call("eth_getUserOperationByHash", [user_op_hash])

    def send_user_operation(self, user_op: dict[str, Any], entry_point: str) -> str:
        result = self.call("eth_sendUserOperation", [user_op, entry_point])
        if not isinstance(result, str) or not _HASH.match(result):
            raise BundlerUnavailable(f"eth_sendUserOperation: malformed userOpHash {result!r}")
        return result.lower()

    def estimate_user_operation_gas(self, user_op: dict[str, Any], entry_point: str) -> dict:
        return self.call("eth_estimateUserOperationGas", [user_op, entry_point])

    def gas_price(self) -> dict:
        """`pimlico_getUserOperationGasPrice` (Alto/Pimlico): slow/standard/fast fees."""
        return self.call("pimlico_getUserOperationGasPrice", [])


_GET_NONCE_ABI = [
    {
        "name": "getNonce",
        "type": "function",
        "stateMutability": "view",
        "inputs": [{"name": "sender", "type": "address"}, {"name": "key", "type": "uint192"}],
        "outputs": [{"name": "nonce", "type": "uint256"}],
    }
]


def entry_point_nonce(
    *, rpc_url: str, timeout: float, entry_point: str, sender: str, key: int, w3: Web3 | None = None
) -> int:
    """The EntryPoint's next nonce for (sender, key), from the chain itself.

    `w3` lets the caller give its own client (instrumented, say); else one is made for rpc_url.
    Raises BundlerUnavailable when the chain cannot be read (the caller decides nothing then)."""
    w3 = w3 or http_web3(rpc_url, timeout=timeout)
    contract = w3.eth.contract(address=Web3.to_checksum_address(entry_point), abi=_GET_NONCE_ABI)
    try:
        nonce = contract.functions.getNonce(Web3.to_checksum_address(sender), key).call()
    except (requests.RequestException, ValueError, Web3Exception, OSError) as exc:
        raise BundlerUnavailable(f"getNonce from {rpc_url}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(nonce, int):
        raise BundlerUnavailable(f"getNonce from {rpc_url}: malformed answer {nonce!r}")
    return nonce
