"""Recovery with a time lock. At set-up the user gets a recovery code, shown once: only the
address of the key derived from it is kept (evm.recovery, scrypt), and an owner op sets that
address as the account's recovery key on every chain. To recover, the user gives the code and
creates a new passkey: the server derives the key in memory, signs the proposal and relays
`proposeRecovery` on every chain. The account adds the new passkey as an owner only after the
on-chain delay, and any owner can cancel meanwhile; staff can see it but not move it."""

from __future__ import annotations

import json
import logging
import secrets
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac
from web3.exceptions import Web3Exception
from webauthn import generate_registration_options, options_to_json
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from actions.accounts.change_delivery import (
    _fail,
    account_change_reconcile,
    change_settle,
    owner_index_on_chain,
)
from actions.accounts.devices import coarse_ip, recovery_attempt_count, recovery_throttled
from actions.accounts.mail import RECOVERY_DONE, RECOVERY_STARTED, mail_on_commit
from actions.accounts.models import (
    ACCOUNT_CHANGE_LIFECYCLE,
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    RecoverySetup,
)
from actions.accounts.owner_changes import (
    account_changes_expire,
    change_client,
    owner_change_propose,
    picnic_accounts,
)
from actions.accounts.passkeys import OFFERED_ALGORITHMS, PasskeyError, passkey_register
from actions.errors import RecoveryRefused, RecoveryThrottled
from actions.evm_clients import card_relayer, tool_web3
from core.lifecycle import Actor, create, transition
from evm.bundler import BundlerError
from evm.recovery import (
    InvalidRecoveryCode,
    execute_recovery_tx,
    new_recovery_code,
    propose_recovery_tx,
    recovery_key_from_code,
    sign_recovery_proposal,
)
from evm.relayer import RelayError

logger = logging.getLogger(__name__)

K = AccountChangeKind
S = AccountChangeStatus
# Derived for an unknown username too, so a wrong name costs the same time as a wrong code.
_NOBODY = "0x000000000000000000000000000000000000dEaD"


def recovery_code_create(*, user) -> tuple[str, AccountChange]:
    """A new code (shown once, kept nowhere) and the owner op setting its key on chain."""
    accounts = picnic_accounts(user=user)
    if not accounts:
        raise PasskeyError("No Picnic account yet", code="no_account")
    account = accounts[0].address
    code = new_recovery_code()
    key = recovery_key_from_code(code, account)
    delay = settings.RECOVERY_DELAY_SECONDS
    change = owner_change_propose(
        user=user,
        kind=K.SET_RECOVERY,
        params={"recovery_address": key.address, "delay_seconds": delay},
    )
    RecoverySetup.objects.update_or_create(
        user=user,
        defaults={
            "account": account,
            "recovery_address": key.address,
            "delay_seconds": delay,
            "change": change,
            "created_at": timezone.now(),
        },
    )
    return code, change


def recovery_user_handle(*, username: str) -> bytes:
    """The WebAuthn user handle of a recovery's new passkey: an HMAC of the username under
    SECRET_KEY, the same 32 bytes for a name that exists and one that does not. The server
    resolves the user from the username it keeps in the session, never from this handle."""
    return salted_hmac("picnic.recovery.user-handle", username, algorithm="sha256").digest()


def recovery_registration_options(*, username: str) -> tuple[str, bytes]:
    """Registration options for the new passkey. Built without looking the username up, so
    the answer has the same shape (and takes the same path) whether it exists or not: the
    page tells nothing about accounts."""
    challenge = secrets.token_bytes(32)
    options = generate_registration_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        rp_name=settings.WEBAUTHN_RP_NAME,
        user_id=recovery_user_handle(username=username),
        user_name=username or "recovery",
        challenge=challenge,
        supported_pub_key_algs=OFFERED_ALGORITHMS,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
    )
    return options_to_json(options), challenge


def _recovery_key(*, username: str, code: str):
    """(user, setup, key) when the code is right; RecoveryRefused otherwise, the same way."""
    user = get_user_model().objects.filter(username=username).first()
    setup = (
        RecoverySetup.objects.filter(user=user).select_related("change").first() if user else None
    )
    active = setup is not None and setup.change and setup.change.status == S.EXECUTED
    try:
        key = recovery_key_from_code(code, setup.account if active else _NOBODY)
    except InvalidRecoveryCode:
        key = None  # not even the shape of a code: the same answer as a wrong one
    if not active or key is None or key.address.lower() != setup.recovery_address.lower():
        raise RecoveryRefused("Recovery refused: username and recovery code do not match")
    return user, setup, key


def _proposals(*, user, key, passkey) -> list[dict]:
    """proposeRecovery on every chain, signed by the recovery key and prepared (not sent)."""
    qx, qy = bytes.fromhex(passkey.public_key_x[2:]), bytes.fromhex(passkey.public_key_y[2:])
    ops = []
    for account in picnic_accounts(user=user):
        state = change_client(account).recovery_state()
        if state is None or state.key.lower() != key.address.lower():
            raise RecoveryRefused("Recovery refused: this chain does not know the recovery key")
        # Signed here, in memory: the key is derived from the code and dropped with it.
        signature = sign_recovery_proposal(
            key, chain_id=account.chain_id, account=account.address, qx=qx, qy=qy, nonce=state.nonce
        )
        relayer = card_relayer(account.chain_id)
        try:
            prepared = relayer.prepare(
                to=account.address, data=propose_recovery_tx(qx=qx, qy=qy, signature=signature)
            )
        except RelayError as exc:
            raise PasskeyError(f"Recovery could not be proposed: {exc}", code="refused") from None
        ops.append({"chain_id": account.chain_id, "tx_hash": prepared.hash, "raw": prepared.raw})
    return ops


def recovery_start(
    *,
    username: str,
    code: str,
    credential: dict,
    expected_challenge: bytes,
    address: str,
    user_agent: str,
) -> AccountChange:
    """Check the code (throttled), register the new passkey (pending), relay the proposal on
    every chain; the change waits for the delay (`account_changes_process` ends it)."""
    if recovery_throttled(username=username, address=address):
        raise RecoveryThrottled("Too many recovery attempts")
    recovery_attempt_count(username=username, address=address)
    user, setup, key = _recovery_key(username=username, code=code)
    if AccountChange.objects.filter(
        user=user, kind=K.RECOVERY, status__in=(S.PROPOSED, S.SUBMITTED, S.WAITING)
    ).exists():
        raise PasskeyError("A recovery is already in progress", code="recovery_in_progress")
    with transaction.atomic():
        # Nothing is kept if a chain refuses: the passkey, the change and the proposals are
        # one unit, and the transactions leave only once they are recorded.
        passkey = passkey_register(
            user=user,
            credential_json=json.dumps(credential),
            expected_challenge=expected_challenge,
            account_address=None,
            device={"user_agent": user_agent[:300], "ip_coarse": coarse_ip(address)},
        )
        ops = _proposals(user=user, key=key, passkey=passkey)
        change = create(
            lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
            actor=Actor.end_user(user),
            values={
                "kind": K.RECOVERY,
                "user": user,
                "account": setup.account,
                "passkey": passkey,
                "ops": [
                    {**{k: v for k, v in op.items() if k != "raw"}, "done": False} for op in ops
                ],
            },
            detail="recovery code accepted; a new passkey proposed as owner",
        )
    try:
        for op in ops:
            relayer = card_relayer(op["chain_id"])
            relayer.send(op["raw"])
            relayer.receipt(op["tx_hash"], wait=10)
    except RelayError as exc:
        return _fail(change, f"proposeRecovery could not be relayed: {exc}")
    change = transition(
        lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
        pk=change.pk,
        to=S.SUBMITTED,
        actor=Actor.system(),
        detail="proposeRecovery relayed: "
        + ", ".join(f"{o['chain_id']} tx {o['tx_hash']}" for o in ops),
    )
    return recovery_settle(change=change)


def _chain_recovery(change: AccountChange):
    """Each chain's recovery() state for the change's account, by chain id."""
    return {
        account.chain_id: change_client(account).recovery_state()
        for account in picnic_accounts(user=change.user)
    }


def recovery_settle(*, change: AccountChange) -> AccountChange:
    """Move a recovery on from what the chains say: proposed everywhere → waiting (readyAt);
    no longer pending anywhere → cancelled (an owner cancelled, even at the last block);
    past readyAt → relay executeRecovery, then executed once every chain added the owner."""
    states = _chain_recovery(change)
    passkey = change.passkey
    qx, qy = passkey.public_key_x.lower(), passkey.public_key_y.lower()

    def pending(state) -> bool:
        return (
            state is not None
            and state.pending is not None
            and "0x" + bytes(state.pending[0]).hex() == qx
            and "0x" + bytes(state.pending[1]).hex() == qy
        )

    if change.status == S.SUBMITTED:
        if all(pending(state) for state in states.values()):
            ready = max(state.ready_at for state in states.values())
            change = transition(
                lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
                pk=change.pk,
                to=S.WAITING,
                actor=Actor.system(),
                updates={
                    "ready_at": datetime.fromtimestamp(ready, tz=UTC),
                    # Each chain's own readyAt: their clocks need not agree.
                    "params": {
                        **change.params,
                        "ready_at_by_chain": {
                            str(chain_id): state.ready_at for chain_id, state in states.items()
                        },
                    },
                },
                detail=f"proposed on every chain; executable from {ready} (chain time)",
            )
            mail_on_commit(change, RECOVERY_STARTED)
        return change
    if change.status != S.WAITING:
        return change
    # Chain time decides (the contract checks it), not this server's clock nor the database:
    # nothing is recorded as executed before every chain has reached the ready time.
    if _owner_added(change):
        if _ready_on_every_chain(change, states, pending):
            return _recovery_done(change)
        logger.error("recovery %s: its passkey is an owner before the ready time", change.pk)
        return change
    if not all(pending(state) for state in states.values()):
        return change_settle(
            change,
            to=S.CANCELLED,
            actor=Actor.system(),
            detail="no longer pending on chain: an owner cancelled it",
        )[0]
    if not _ready_on_every_chain(change, states, pending):
        return change
    for account in picnic_accounts(user=change.user):
        relayer = card_relayer(account.chain_id)
        try:
            prepared = relayer.prepare(to=account.address, data=execute_recovery_tx())
            relayer.send(prepared.raw)
            relayer.receipt(prepared.hash, wait=10)
        except RelayError as exc:
            logger.warning("recovery %s on chain %s: %s", change.pk, account.chain_id, exc)
    if _owner_added(change):
        return _recovery_done(change)
    return change


def _ready_on_every_chain(change: AccountChange, states: dict, pending) -> bool:
    """Every chain's latest block is at or past the recovery's readyAt on that chain: the
    one it holds while pending, else the one recorded when the change started waiting. Each
    chain is compared with its own readyAt, not the latest over all chains, since the
    clocks of two chains need not agree."""
    recorded = change.params.get("ready_at_by_chain", {})
    fallback = int(change.ready_at.timestamp()) if change.ready_at else 0
    # `states` has one entry per chain of the user's accounts (_chain_recovery).
    for chain_id, state in states.items():
        ready = state.ready_at if pending(state) else recorded.get(str(chain_id), fallback)
        if not ready or tool_web3(chain_id).eth.get_block("latest")["timestamp"] < ready:
            return False
    return True


def _owner_added(change: AccountChange) -> bool:
    return all(
        owner_index_on_chain(account=account, passkey=change.passkey) is not None
        for account in picnic_accounts(user=change.user)
    )


def _recovery_done(change: AccountChange) -> AccountChange:
    change, moved = change_settle(
        change,
        to=S.EXECUTED,
        actor=Actor.system(),
        only_from={S.WAITING},
        detail="executeRecovery: the new passkey is an owner on every chain",
    )
    if moved:
        mail_on_commit(change, RECOVERY_DONE)
    return change


def account_change_refresh(*, change: AccountChange) -> AccountChange:
    """One submitted or waiting change moved on from what the chains say (its page's poll)."""
    try:
        if change.kind == K.RECOVERY:
            recovery_settle(change=change)
        elif change.status == S.SUBMITTED:
            account_change_reconcile(change=change)
    except (BundlerError, RelayError, Web3Exception, OSError) as exc:
        logger.warning("account change %s: %s", change.pk, exc)  # the next poll tries again
    return AccountChange.objects.select_related("passkey", "signer").get(pk=change.pk)


def account_changes_process() -> dict[str, int]:
    """Beat: proposals left unsigned expired; submitted owner ops reconciled (a chain that
    missed one re-driven once it answers again, with backoff); recoveries moved on (few rows:
    open ones)."""
    counts = {"expired": account_changes_expire(), "reconciled": 0, "recoveries": 0}
    for change in AccountChange.objects.filter(status__in=(S.SUBMITTED, S.WAITING)).select_related(
        "user", "passkey", "target"
    ):
        try:
            if change.kind == K.RECOVERY:
                recovery_settle(change=change)
                counts["recoveries"] += 1
            elif change.status == S.SUBMITTED:
                account_change_reconcile(change=change)
                counts["reconciled"] += 1
        except Exception:  # one bad change must not stop the others; logged with its id
            logger.exception("account change %s could not be processed", change.pk)
    return counts


def recovery_for_staff(*, user) -> AccountChange | None:
    """The recovery in progress, for staff pages: read-only."""
    return (
        AccountChange.objects.filter(user=user, kind=K.RECOVERY)
        .exclude(status__in=(S.EXECUTED, S.FAILED, S.CANCELLED))
        .first()
    )
