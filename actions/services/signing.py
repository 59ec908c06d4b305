"""Signing, the second step of an action's lifecycle: the user signs a `proposed` action with
their passkey on the signing page (or rejects it). The challenge of a 4337 action is its
userOpHash: the assertion the browser returns is what the smart account verifies on chain, so
the server verifies exactly that, once, before submitting. How the signature is stored depends
on the action's kind (`kinds.KINDS`)."""

from __future__ import annotations

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
from webauthn.helpers.structs import (
    PublicKeyCredentialDescriptor,
    UserVerificationRequirement,
)

from actions.models import Action, ActionStatus, Passkey, SmartAccount
from actions.services.account_changes import signer_refusal
from actions.services.kinds import kind_of
from actions.services.lifecycle import action_expire_if_overdue, swap_quote_bounded
from actions.services.passkeys import PasskeyError
from actions.services.transitions import action_transition
from core.lifecycle import Actor, IllegalTransition, enqueue_on_commit
from evm.signature import pack_owner_signature


def action_challenge(action: Action) -> bytes:
    """What the passkey signs: the userOpHash, or (card actions) the Safe message hash of the
    SIWE message."""
    value = action.user_op_hash or action.params.get("challenge")
    if not value:
        raise PasskeyError("This action has nothing to sign", code="nothing_to_sign")
    return bytes.fromhex(value[2:])


def _signing_account(action: Action) -> SmartAccount:
    # Card actions operate on the Safe; the passkey account that owns it signs.
    owner = action.params.get("owner") or action.smart_account
    account = (
        SmartAccount.objects.select_related("passkey")
        .filter(user=action.user, address=owner, passkey__isnull=False)
        .first()
    )
    if account is None:
        raise PasskeyError("This action's smart account has no passkey", code="no_passkey")
    return account


def _signers(action: Action):
    """The user's passkeys offered to sign: all of them, so a device whose passkey is pending
    or was removed is told why in plain words (signer_refusal) rather than finding nothing to
    sign with."""
    return Passkey.objects.filter(user=action.user)


def authentication_options(*, action: Action) -> str:
    _signing_account(action)  # the action has a passkey account (or no_passkey)
    options = generate_authentication_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        challenge=action_challenge(action),
        allow_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id))
            for p in _signers(action).order_by("pk")
        ],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return options_to_json(options)


def _refusal_code(reason: str) -> str:
    """py_webauthn says why in English prose; the page needs to know which kind of refusal."""
    lowered = reason.lower()
    if "sign count" in lowered:
        return "sign_count"  # an older copy of the passkey, or a cloned authenticator
    if "user verification" in lowered or "user was not verified" in lowered:
        return "user_verification"
    return "refused"


def action_sign(*, action_id, user, credential_json: str) -> Action:
    """Verify the assertion over the action's userOpHash and move it to `signed`.

    Single use: only a `proposed`, unexpired action can be signed, so a replayed or late
    assertion is refused and changes nothing."""

    action = Action.objects.get(pk=action_id, user=user)
    action = action_expire_if_overdue(action=action)
    if action.status == ActionStatus.EXPIRED and swap_quote_bounded(action):
        raise PasskeyError(
            "This swap can no longer be signed: its price quote expired before it was signed",
            code="quote_expired",
        )
    if action.status != ActionStatus.PROPOSED:
        raise PasskeyError(
            f"This action can no longer be signed: it is {action.status}", code="not_proposed"
        )
    account = _signing_account(action)
    try:
        credential = parse_authentication_credential_json(credential_json)
    except (WebAuthnException, ValueError):  # not JSON, missing fields, bad base64url
        raise PasskeyError(
            "Signature refused: the assertion could not be read", code="unreadable"
        ) from None
    # Any owner of the account signs, naming its index; a removed, pending or departing
    # passkey is refused here, in plain words, before anything reaches the chain.
    passkey = Passkey.objects.filter(
        user=action.user, credential_id=bytes_to_base64url(credential.raw_id)
    ).first()
    if passkey is None:
        raise PasskeyError(
            "Signature refused: this passkey does not own the smart account", code="wrong_passkey"
        )
    refusal = signer_refusal(passkey)
    if refusal is not None:
        raise refusal
    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=action_challenge(action),
            expected_rp_id=settings.WEBAUTHN_RP_ID,
            expected_origin=settings.WEBAUTHN_ORIGIN,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=True,
        )
    except InvalidAuthenticationResponse as exc:
        raise PasskeyError(f"Signature refused: {exc}", code=_refusal_code(str(exc))) from None
    # The index it was added at: every owner change applies on every chain, so it is the
    # same on each (account_changes._apply checks that).
    signature = pack_owner_signature(
        owner_index=passkey.owner_index,
        authenticator_data=credential.response.authenticator_data,
        client_data_json=credential.response.client_data_json,
        signature_der=credential.response.signature,
    )
    with transaction.atomic():
        # The sign count only moves forward (a cloned authenticator would replay an old one).
        updated = Passkey.objects.filter(pk=passkey.pk, sign_count=passkey.sign_count).update(
            sign_count=verified.new_sign_count, last_used_at=timezone.now()
        )
        if not updated:
            raise PasskeyError(
                "Signature refused: the passkey was used concurrently", code="sign_count"
            )
        try:
            action = action_transition(
                action_id=action.pk,
                to=ActionStatus.SIGNED,
                actor=Actor.end_user(user),
                only_from={ActionStatus.PROPOSED},
                updates=kind_of(action.type).signed_updates(
                    action, account=account, signature=signature
                ),
                detail=f"signed with passkey {passkey.credential_id[:16]}… "
                f"(owner {passkey.owner_index})",
            )
        except IllegalTransition as exc:
            raise PasskeyError(
                f"This action can no longer be signed: it is {exc.current}", code="not_proposed"
            ) from None
        enqueue_on_commit("actions.tasks.action_submit", action.pk)
    return action


def action_reject(*, action_id, user) -> Action:
    action = action_expire_if_overdue(action=Action.objects.get(pk=action_id, user=user))
    try:
        return action_transition(
            action_id=action.pk,
            to=ActionStatus.REJECTED,
            actor=Actor.end_user(user),
            only_from={ActionStatus.PROPOSED},
            detail="user declined on the signing page",
        )
    except IllegalTransition as exc:
        raise PasskeyError(
            f"This action can no longer be rejected: it is {exc.current}", code="not_proposed"
        ) from None
