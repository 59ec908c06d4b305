"""Account changes: who owns the user's Picnic account, on every configured chain at once.

Adding a passkey (a linked device), removing one, setting the recovery key and cancelling a
recovery are user operations of the account calling itself (`addOwner`,
`removeOwnerAtIndex`, `setRecovery`, `cancelRecovery`), one per chain, signed with ONE passkey
prompt: the passkey signs keccak256(abi.encode(every op hash)) and each op's signature carries
the list (evm.signature.pack_owner_signature). A recovery is relayed by the server from the
recovery code (recovery.py). Each change is tracked through the `accountChange` lifecycle."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    options_to_json,
    verify_authentication_response,
)
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    parse_authentication_credential_json,
)
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, WebAuthnException
from webauthn.helpers.structs import PublicKeyCredentialDescriptor, UserVerificationRequirement

from actions.accounts.models import (
    ACCOUNT_CHANGE_LIFECYCLE,
    ACCOUNT_CHANGE_OPEN,
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    OwnerState,
    Passkey,
    SmartAccount,
    SmartAccountKind,
)
from actions.accounts.passkeys import PasskeyError
from actions.accounts.selectors import passkey_from_recovery
from actions.evm_clients import bundler_client, on_chain, tool_web3
from core.chains import get_chain
from core.lifecycle import (
    Actor,
    IllegalTransition,
    create,
    enqueue_on_commit,
    transition,
)
from evm.passkey_account import PasskeyAccountClient
from evm.signature import batch_challenge, pack_owner_signature
from evm.userops import entry_point_address, user_op_hash

logger = logging.getLogger(__name__)

K = AccountChangeKind
S = AccountChangeStatus
# Owner changes use their own EntryPoint nonce sequence: proposing one does not take the
# nonce of a transfer waiting for its signature (nor the other way round).
CHANGE_NONCE_KEY = 1
# Changes an owner signs (one op per chain on that nonce sequence); a recovery is relayed.
OWNER_SIGNED = (K.ADD_OWNER, K.REMOVE_OWNER, K.SET_RECOVERY, K.CANCEL_RECOVERY)


def picnic_accounts(*, user) -> list[SmartAccount]:
    """The user's passkey account on each configured chain (one address), by chain id."""
    return list(
        SmartAccount.objects.select_related("passkey")
        .filter(user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False)
        .order_by("chain_id")
    )


def passkey_key(passkey: Passkey) -> tuple[bytes, bytes]:
    return bytes.fromhex(passkey.public_key_x[2:]), bytes.fromhex(passkey.public_key_y[2:])


def change_client(account: SmartAccount, *, batch_size: int = 0) -> PasskeyAccountClient:
    """The account's client on its chain; `batch_size` sizes the gas-estimation stub for a
    signature that carries every chain's op hash."""
    return PasskeyAccountClient(
        tool_web3(account.chain_id),
        bytes.fromhex(account.passkey.public_key_x[2:]),
        bytes.fromhex(account.passkey.public_key_y[2:]),
        version=account.entry_point_version,
        salt=account.salt,
        origin=settings.WEBAUTHN_ORIGIN,
        batch_size=batch_size,
    )


def _op(account: SmartAccount, call_of, *, batch_size: int) -> dict[str, Any]:
    """The unsigned user operation of `call_of(client)` on the account's chain, and its hash."""
    chain = get_chain(account.chain_id)
    with on_chain(chain):
        client = change_client(account, batch_size=batch_size)
        bundler = bundler_client(chain.id, timeout=max(settings.BUNDLER_TIMEOUT_SECONDS, 10))
        op = client.build(call_of(client), bundler, nonce_key=CHANGE_NONCE_KEY)
    entry_point = entry_point_address(account.entry_point_version)
    return {
        "chain_id": chain.id,
        "entry_point": entry_point,
        "version": account.entry_point_version,
        "user_op": op,
        "user_op_hash": user_op_hash(
            op, entry_point=entry_point, chain_id=chain.id, version=account.entry_point_version
        ),
        "tx_hash": None,
        "done": False,
    }


def _challenge(ops: list[dict]) -> str:
    hashes = [op["user_op_hash"] for op in ops]
    if len(hashes) == 1:
        return hashes[0]
    return "0x" + batch_challenge(hashes).hex()


def _calls(kind: str, *, passkey: Passkey | None, params: dict):
    if kind == K.ADD_OWNER:
        qx, qy = passkey_key(passkey)
        return lambda client: client.add_owner_call(qx, qy)
    if kind == K.REMOVE_OWNER:
        qx, qy = passkey_key(passkey)
        return lambda client: client.remove_owner_call(passkey.owner_index, qx, qy)
    if kind == K.SET_RECOVERY:
        return lambda client: client.set_recovery_call(
            params["recovery_address"], params["delay_seconds"]
        )
    if kind == K.CANCEL_RECOVERY:
        return lambda client: client.cancel_recovery_call()
    raise ValueError(f"{kind} is not signed by an owner")


def live_owners(*, user):
    """Passkeys that can sign: active on chain and not being removed."""
    return Passkey.objects.filter(
        user=user, owner_state=OwnerState.ACTIVE, owner_index__isnull=False
    )


def _refuse_recovery_passkey(passkey: Passkey) -> None:
    # addOwner takes effect at once: a recovery's passkey waits out the delay instead.
    if passkey_from_recovery(passkey=passkey):
        raise PasskeyError(
            "This passkey comes from a recovery: it becomes an owner only through the "
            "time-locked recovery, after its ready time",
            code="recovery_passkey",
        )


def owner_change_propose(
    *, user, kind: str, passkey: Passkey | None = None, params: dict | None = None, target=None
) -> AccountChange:
    """Build the change's user op on every chain (proposed). Refusals say why (`code`)."""
    params = params or {}
    accounts = picnic_accounts(user=user)
    if not accounts:
        raise PasskeyError("No Picnic account yet", code="no_account")
    if kind == K.ADD_OWNER and passkey.owner_state != OwnerState.PENDING:
        raise PasskeyError("This passkey is not waiting to be added", code="not_pending")
    if kind == K.ADD_OWNER:
        _refuse_recovery_passkey(passkey)
    if kind == K.REMOVE_OWNER:
        if passkey.owner_state != OwnerState.ACTIVE or passkey.owner_index is None:
            raise PasskeyError("This passkey is not an owner", code="not_owner")
        if not live_owners(user=user).exclude(pk=passkey.pk).exists():
            raise PasskeyError("The last owner cannot be removed", code="last_owner")
    if AccountChange.objects.filter(
        user=user, status__in=(S.SIGNED, S.SUBMITTED), kind__in=OWNER_SIGNED
    ).exists():
        # Its op may still be missing on a chain that is down: a new one would take the same
        # nonce there, and one of the two would never apply.
        raise PasskeyError(
            "Another change to this account is still being applied", code="change_in_progress"
        )
    calls = _calls(kind, passkey=passkey, params=params)
    # One chain: the passkey signs the op hash itself; several: the list of every op hash.
    batch_size = len(accounts) if len(accounts) > 1 else 0
    ops = [_op(account, calls, batch_size=batch_size) for account in accounts]
    return create(
        lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
        actor=Actor.end_user(user),
        values={
            "kind": kind,
            "user": user,
            "account": accounts[0].address,
            "passkey": passkey,
            "target": target,
            "ops": ops,
            "challenge": _challenge(ops),
            "params": params,
        },
        detail=f"user operations built on chains {', '.join(str(o['chain_id']) for o in ops)}",
    )


def passkey_request(*, challenge: bytes, allowed) -> str:
    """The WebAuthn request (JSON) for `challenge`, answerable by any of the `allowed` passkeys,
    with user verification."""
    options = generate_authentication_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        challenge=challenge,
        allow_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id)) for p in allowed
        ],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return options_to_json(options)


def change_options(*, change: AccountChange, exclude: Passkey | None = None) -> str:
    """The WebAuthn request: the challenge covers every chain's op. Every passkey of the user
    is allowed, so a pending or removed one is told why in plain words (signer_refusal)
    rather than silently not offered."""
    allowed = Passkey.objects.filter(user=change.user)
    if exclude is not None:
        allowed = allowed.exclude(pk=exclude.pk)
    return passkey_request(challenge=bytes.fromhex(change.challenge[2:]), allowed=allowed)


def signer_refusal(passkey: Passkey) -> PasskeyError | None:
    """Why this passkey cannot sign for the account, if it cannot (plain words on the page)."""
    if passkey.owner_state == OwnerState.REMOVED:
        refusal = PasskeyError(
            f"This passkey was removed from your account on {passkey.removed_at:%Y-%m-%d}",
            code="passkey_removed",
        )
        refusal.removed_at = passkey.removed_at  # the page says when, in the user's words
        return refusal
    if passkey.owner_state == OwnerState.PENDING:
        return PasskeyError("This passkey is waiting to be approved", code="passkey_pending")
    if passkey.owner_state == OwnerState.REMOVING:
        return PasskeyError("This passkey is being removed", code="passkey_removing")
    if passkey.owner_index is None:
        return PasskeyError("This passkey is not an owner", code="wrong_passkey")
    return None


def _refusal_code(reason: str) -> str:
    """py_webauthn says why in English prose; the page needs to know which kind of refusal."""
    lowered = reason.lower()
    if "sign count" in lowered:
        return "sign_count"  # an older copy of the passkey, or a cloned authenticator
    if "user verification" in lowered or "user was not verified" in lowered:
        return "user_verification"
    return "refused"


def verify_signer(*, user, credential_json: str, challenge: bytes) -> tuple[Passkey, Any, Any]:
    """The user's passkey that made this assertion over `challenge`, verified (not yet
    counted): (passkey, credential, verification)."""
    try:
        credential = parse_authentication_credential_json(credential_json)
    except (WebAuthnException, ValueError):
        raise PasskeyError(
            "Signature refused: the assertion could not be read", code="unreadable"
        ) from None
    passkey = Passkey.objects.filter(
        user=user, credential_id=bytes_to_base64url(credential.raw_id)
    ).first()
    if passkey is None:
        raise PasskeyError("Signature refused: not a passkey of this user", code="wrong_passkey")
    refusal = signer_refusal(passkey)
    if refusal is not None:
        raise refusal
    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=challenge,
            expected_rp_id=settings.WEBAUTHN_RP_ID,
            expected_origin=settings.WEBAUTHN_ORIGIN,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=True,
        )
    except InvalidAuthenticationResponse as exc:
        raise PasskeyError(f"Signature refused: {exc}", code=_refusal_code(str(exc))) from None
    return passkey, credential, verified


def count_use(passkey: Passkey, verified) -> None:
    """The sign count only moves forward (a cloned authenticator would replay an old one)."""
    updated = Passkey.objects.filter(pk=passkey.pk, sign_count=passkey.sign_count).update(
        sign_count=verified.new_sign_count, last_used_at=timezone.now()
    )
    if not updated:
        raise PasskeyError(
            "Signature refused: the passkey was used concurrently", code="sign_count"
        )


def removal_claim(*, user, signer_id: int, target_id: int) -> None:
    """Mark `target` as being removed, signed by `signer`, under a lock on the user's
    passkeys: two devices removing each other at once are serialised here, and the second
    finds its own passkey being removed (or no other owner left) and is refused. The account
    keeps at least one owner, and the contract refuses the last one too."""
    owners = {p.pk: p for p in Passkey.objects.select_for_update().filter(user=user).order_by("pk")}
    signer, target = owners.get(signer_id), owners.get(target_id)
    if signer is None or target is None:
        raise PasskeyError("No such passkey", code="not_found")
    refusal = signer_refusal(signer)
    if refusal is not None:
        raise refusal
    if target.owner_state != OwnerState.ACTIVE:
        raise PasskeyError(f"This passkey is {target.owner_state}", code="not_owner")
    if signer.pk == target.pk:
        raise PasskeyError("A passkey cannot remove itself", code="self_removal")
    live = [p for p in owners.values() if p.owner_state == OwnerState.ACTIVE and p.pk != target.pk]
    if not live:
        raise PasskeyError("The last owner cannot be removed", code="last_owner")
    Passkey.objects.filter(pk=target.pk).update(owner_state=OwnerState.REMOVING)


def owner_change_sign(*, change_id, user, credential_json: str) -> AccountChange:
    """Verify the one assertion over every chain's op and sign each op with it (signed)."""
    change = AccountChange.objects.select_related("passkey").get(pk=change_id, user=user)
    change = account_change_expire_if_overdue(change=change)
    if change.status == S.EXPIRED:
        raise PasskeyError("This change expired before it was signed", code="change_expired")
    if change.status != S.PROPOSED:
        raise PasskeyError(f"This change is {change.status}", code="not_proposed")
    if change.kind == K.ADD_OWNER and change.passkey_id:
        _refuse_recovery_passkey(change.passkey)  # built before the refusal above existed
    passkey, credential, verified = verify_signer(
        user=user, credential_json=credential_json, challenge=bytes.fromhex(change.challenge[2:])
    )
    batch = [op["user_op_hash"] for op in change.ops] if len(change.ops) > 1 else []
    signed_ops = [
        {
            **op,
            "user_op": {
                **op["user_op"],
                "signature": pack_owner_signature(
                    owner_index=passkey.owner_index,
                    batch=batch,
                    authenticator_data=credential.response.authenticator_data,
                    client_data_json=credential.response.client_data_json,
                    signature_der=credential.response.signature,
                ),
            },
        }
        for op in change.ops
    ]
    with transaction.atomic():
        count_use(passkey, verified)
        if change.kind == K.REMOVE_OWNER:
            removal_claim(user=user, signer_id=passkey.pk, target_id=change.passkey_id)
        try:
            change = transition(
                lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
                pk=change.pk,
                to=S.SIGNED,
                actor=Actor.end_user(user),
                only_from={S.PROPOSED},
                updates={"ops": signed_ops, "signer": passkey},
                detail=f"signed with passkey {passkey.credential_id[:16]}… (owner {passkey.owner_index})",
            )
        except IllegalTransition as exc:
            raise PasskeyError(f"This change is {exc.current}", code="not_proposed") from None
        enqueue_on_commit("actions.tasks.account_change_submit_task", change.pk)
    return change


def account_changes_expire(*, now=None) -> int:
    """Proposed changes nobody signed within ACCOUNT_CHANGE_EXPIRY_SECONDS → expired. Only
    `proposed` ones: a signed change may be on a chain already, and a recovery's steps are
    on chain from the start; those are never expired."""
    overdue = AccountChange.objects.filter(status=S.PROPOSED, created_at__lt=_expiry_cutoff(now))
    return sum(
        _expire(pk) for pk in list(overdue.exclude(kind=K.RECOVERY).values_list("pk", flat=True))
    )


def account_change_expire_if_overdue(*, change: AccountChange) -> AccountChange:
    """Expired on read: a page opened after the expiry sees it at once, not at the next
    sweep."""
    if change.status != S.PROPOSED or change.kind == K.RECOVERY:
        return change
    if change.created_at >= _expiry_cutoff(None) or not _expire(change.pk):
        return change
    return AccountChange.objects.select_related("passkey", "signer").get(pk=change.pk)


def _expiry_cutoff(now):
    return (now or timezone.now()) - timedelta(seconds=settings.ACCOUNT_CHANGE_EXPIRY_SECONDS)


def _expire(pk) -> bool:
    try:
        transition(
            lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
            pk=pk,
            to=S.EXPIRED,
            actor=Actor.system(),
            only_from={S.PROPOSED},
            detail=f"not signed within {settings.ACCOUNT_CHANGE_EXPIRY_SECONDS} s",
        )
    except IllegalTransition:
        return False  # signed or cancelled meanwhile
    return True


def account_change_cancel_proposed(*, change_id, user) -> AccountChange:
    """The user leaves a change unsigned (proposed → cancelled)."""
    change = transition(
        lifecycle=ACCOUNT_CHANGE_LIFECYCLE,
        pk=change_id,
        to=S.CANCELLED,
        actor=Actor.end_user(user),
        only_from={S.PROPOSED},
        detail="not signed: the user cancelled",
    )
    return change


def account_changes_open(*, user):
    return AccountChange.objects.filter(user=user, status__in=ACCOUNT_CHANGE_OPEN)
