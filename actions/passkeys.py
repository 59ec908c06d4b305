"""Passkeys: registration (py_webauthn) and signing an action with an assertion.

The challenge of a 4337 action is its userOpHash: the assertion the browser returns is what the
smart account verifies on chain, so the server verifies exactly that, once, before submitting.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import (
    base64url_to_bytes,
    bytes_to_base64url,
    parse_authentication_credential_json,
)
from webauthn.helpers.cose import COSEAlgorithmIdentifier
from webauthn.helpers.decode_credential_public_key import (
    DecodedEC2PublicKey,
    decode_credential_public_key,
)
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, InvalidRegistrationResponse
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from actions.models import (
    Action,
    ActionStatus,
    ActionType,
    Passkey,
    SmartAccount,
    SmartAccountKind,
)
from actions.services import action_expire_if_overdue, action_transition
from picnic.lifecycle import Actor, IllegalTransition


class PasskeyError(Exception):
    """A registration or assertion that is refused; the message is safe to show."""


def registration_options(*, user) -> tuple[str, bytes]:
    challenge = secrets.token_bytes(32)
    options = generate_registration_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        rp_name=settings.WEBAUTHN_RP_NAME,
        user_id=str(user.pk).encode(),
        user_name=user.get_username(),
        challenge=challenge,
        supported_pub_key_algs=[COSEAlgorithmIdentifier.ECDSA_SHA_256],
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id))
            for p in user.passkeys.all()
        ],
    )
    return options_to_json(options), challenge


@transaction.atomic
def passkey_register(
    *, user, credential_json: str, expected_challenge: bytes, account_address
) -> Passkey:
    """Verify a registration and store the credential with the user's Picnic smart account.

    `account_address(qx, qy)` computes the counterfactual account address for the key."""
    try:
        verified = verify_registration_response(
            credential=credential_json,
            expected_challenge=expected_challenge,
            expected_rp_id=settings.WEBAUTHN_RP_ID,
            expected_origin=settings.WEBAUTHN_ORIGIN,
            require_user_verification=True,
            supported_pub_key_algs=[COSEAlgorithmIdentifier.ECDSA_SHA_256],
        )
    except InvalidRegistrationResponse as exc:
        raise PasskeyError(f"Passkey registration refused: {exc}") from None
    key = decode_credential_public_key(verified.credential_public_key)
    if not isinstance(key, DecodedEC2PublicKey):
        raise PasskeyError("Passkey registration refused: only P-256 keys can own a smart account")
    transports = []
    try:
        import json

        transports = json.loads(credential_json).get("response", {}).get("transports") or []
    except ValueError:
        pass
    passkey = Passkey.objects.create(
        user=user,
        credential_id=bytes_to_base64url(verified.credential_id),
        public_key=verified.credential_public_key,
        public_key_x="0x" + key.x.hex(),
        public_key_y="0x" + key.y.hex(),
        sign_count=verified.sign_count,
        transports=transports,
    )
    if not SmartAccount.objects.filter(
        user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False
    ).exists():
        address, factory = account_address(key.x, key.y)
        SmartAccount.objects.create(
            user=user,
            kind=SmartAccountKind.PICNIC,
            chain_id=settings.CHAIN_ID,
            address=address,
            entry_point_version=settings.ENTRY_POINT_VERSION,
            factory=factory,
            owner=f"passkey:{passkey.credential_id}",
            passkey=passkey,
        )
    return passkey


def action_challenge(action: Action) -> bytes:
    """What the passkey signs: the userOpHash, or (card actions) the Safe message hash of the
    SIWE message."""
    value = action.user_op_hash or action.params.get("challenge")
    if not value:
        raise PasskeyError("This action has nothing to sign")
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
        raise PasskeyError("This action's smart account has no passkey")
    return account


def authentication_options(*, action: Action) -> str:
    passkey = _signing_account(action).passkey
    options = generate_authentication_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        challenge=action_challenge(action),
        allow_credentials=[
            PublicKeyCredentialDescriptor(id=base64url_to_bytes(passkey.credential_id))
        ],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return options_to_json(options)


def action_sign(*, action_id, user, credential_json: str) -> Action:
    """Verify the assertion over the action's userOpHash and move it to `signed`.

    Single use: only a `proposed`, unexpired action can be signed, so a replayed or late
    assertion is refused and changes nothing."""
    from evm.signature import pack_assertion

    action = Action.objects.get(pk=action_id, user=user)
    action = action_expire_if_overdue(action=action)
    if action.status != ActionStatus.PROPOSED:
        raise PasskeyError(f"This action can no longer be signed: it is {action.status}")
    account = _signing_account(action)
    passkey = account.passkey
    try:
        credential = parse_authentication_credential_json(credential_json)
    except Exception:  # noqa: BLE001 - any unparsable body is a refused assertion
        raise PasskeyError("Signature refused: the assertion could not be read") from None
    if bytes_to_base64url(credential.raw_id) != passkey.credential_id:
        raise PasskeyError("Signature refused: this passkey does not own the smart account")
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
        raise PasskeyError(f"Signature refused: {exc}") from None
    signature = pack_assertion(
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
            raise PasskeyError("Signature refused: the passkey was used concurrently")
        try:
            action = action_transition(
                action_id=action.pk,
                to=ActionStatus.SIGNED,
                actor=Actor.end_user(user),
                only_from={ActionStatus.PROPOSED},
                updates=_signed_updates(action, account, signature),
                detail=f"signed with passkey {passkey.credential_id[:16]}…",
            )
        except IllegalTransition as exc:
            raise PasskeyError(
                f"This action can no longer be signed: it is {exc.current}"
            ) from None
        transaction.on_commit(lambda: _enqueue_submit(action.pk), robust=True)
    return action


def _signed_updates(action: Action, account: SmartAccount, signature: str) -> dict:
    if action.user_op is not None:
        return {"user_op": {**action.user_op, "signature": signature}}
    if action.type == ActionType.CARD_LIMIT_SET:
        # PasskeyAccount.execModuleTx checks the raw assertion itself.
        return {"params": {**action.params, "module_signature": signature}}
    from evm.safe_signature import contract_signature

    safe_signature = contract_signature(
        owner=account.address, owner_signature=bytes.fromhex(signature[2:])
    )
    return {"params": {**action.params, "siwe_signature": safe_signature}}


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
        raise PasskeyError(f"This action can no longer be rejected: it is {exc.current}") from None


def _enqueue_submit(action_id) -> None:
    from actions.tasks import action_submit

    action_submit.delay(str(action_id))
