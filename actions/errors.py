"""What the actions services refuse (domain errors with their status and code, core.errors), and
the one translation of what their dependencies raise (a chain node, the bundler, ENS, Gnosis
Pay, LI.FI) into the 503 a client reads: named, with the reason and never the address."""

from __future__ import annotations

import json
import logging

import requests
from eth_abi.exceptions import DecodingError
from web3.exceptions import Web3Exception

from actions.evm_clients import ChainUnavailable
from actions.providers.gnosis_pay import Unavailable as GnosisPayUnavailable
from actions.providers.lifi import ProviderUnavailable as SwapProviderUnavailable
from core import errors
from core.api import failure_reason
from core.chains import Chain
from evm.bundler import BundlerError
from evm.ens import EnsUnavailable

logger = logging.getLogger(__name__)


class PasskeyError(Exception):
    """A registration or assertion that is refused. The message is for logs and the API; the
    `code` picks what the end-user pages say, in the user's language (actions/pages.py). It is
    here, below the rooms, because those shared page helpers catch it."""

    def __init__(self, message: str, *, code: str = "refused"):
        super().__init__(message)
        self.code = code


class ActionNotFound(errors.NotFound):
    doc = "Action not found: <id>"


class ActionAccessDenied(errors.Forbidden):
    pass


class InvalidCursor(errors.DomainError):
    """A cursor the caller made up or mangled: the input's `cursor` field is refused."""

    code = "invalid_input"

    def __init__(self, reason: str):
        super().__init__(errors.INVALID_INPUT, errors={"cursor": [reason]})


class RecoveryRefused(errors.DomainError):
    """Wrong code, unknown username, no recovery key: one answer for all of them."""

    code = "recovery_refused"


class RecoveryThrottled(errors.DomainError):
    status = 429
    code = "throttled"


# What a chain read may raise when the RPC fails: transport, JSON-RPC error, an answer that
# does not decode. Anything else is a bug: it propagates and is logged as a 500.
CHAIN_READ_ERRORS = (
    requests.RequestException,  # refused, timed out, dropped, HTTP 5xx
    OSError,
    Web3Exception,  # a JSON-RPC error, a batch answer of the wrong shape
    json.JSONDecodeError,  # a body that is not JSON
    DecodingError,  # a word that is not the ABI encoding asked for
)

DEPENDENCIES_DOC = (
    "The bundler could not prepare the user operation, the chain could not be read, Gnosis "
    "Pay could not be reached, or (swap) LI.FI could not be reached"
)


def chain_unavailable(exc: Exception, chain: Chain | None = None) -> errors.Unavailable:
    # What failed and on which chain (by name), not where: the RPC URL stays in the log.
    logger.warning("chain RPC failed%s: %r", f" ({chain.name})" if chain else "", exc)
    which = f"The chain {chain.name}" if chain else "The chain"
    return errors.Unavailable(
        f"{which} could not be read: {failure_reason(exc)}", code="chain_unavailable"
    )


def dependency_error(exc: Exception) -> errors.Unavailable | None:
    """The 503 for a dependency's failure under an actions API view; None for anything else
    (a bug: a 500)."""
    if isinstance(exc, EnsUnavailable):  # the name's chain did not answer (named in the text)
        return errors.Unavailable(str(exc), code=exc.code)
    if isinstance(exc, ChainUnavailable):  # one chain's node or bundler: named; others unaffected
        if exc.part == "bundler":
            logger.warning("bundler of %s failed: %r", exc.chain.name, exc.cause)
            return errors.Unavailable(
                f"The bundler of {exc.chain.name} could not prepare the user operation: "
                f"{failure_reason(exc.cause)}",
                code="bundler_unavailable",
            )
        return chain_unavailable(exc.cause, exc.chain)
    if isinstance(exc, BundlerError):
        logger.warning("bundler refused to prepare a user operation: %r", exc)
        return errors.Unavailable(
            f"The bundler could not prepare the user operation: {failure_reason(exc)}",
            code="bundler_unavailable",
        )
    if isinstance(exc, CHAIN_READ_ERRORS):  # the account client reads the chain (nonce, code)
        return chain_unavailable(exc)
    if isinstance(exc, GnosisPayUnavailable):  # card_freeze/unfreeze: the sign-in could not start
        logger.warning("Gnosis Pay unavailable: %r", exc)
        return errors.Unavailable(
            f"Gnosis Pay could not start the sign-in: {failure_reason(exc)}",
            code="gnosis_pay_unavailable",
        )
    if isinstance(exc, SwapProviderUnavailable):  # swap: LI.FI is down, slow or answering 5xx
        logger.warning("swap provider unavailable: %r", exc)
        return errors.Unavailable(
            f"The swap provider (LI.FI) could not be reached, so no quote could be made: "
            f"{failure_reason(exc)}. Nothing was proposed; try again later.",
            code="swap_provider_unavailable",
        )
    return None
