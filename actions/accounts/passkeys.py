"""Passkey registration: the WebAuthn ceremony (py_webauthn) that stores a P-256 credential and
gives the user their Picnic smart account (its counterfactual address, deployed with the first
user operation). Signing an action with the passkey is in `signing.py`."""

from __future__ import annotations

import json
import secrets

from django.conf import settings
from django.db import transaction
from webauthn import (
    generate_registration_options,
    options_to_json,
    verify_registration_response,
)
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url
from webauthn.helpers.cose import COSEAlgorithmIdentifier
from webauthn.helpers.decode_credential_public_key import (
    DecodedEC2PublicKey,
    decode_credential_public_key,
)
from webauthn.helpers.exceptions import (
    InvalidJSONStructure,
    InvalidRegistrationResponse,
    WebAuthnException,
)
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from actions.accounts.models import OwnerState, Passkey, SmartAccount, SmartAccountKind
from actions.accounts.selectors import passkey_from_recovery
from actions.errors import PasskeyError
from actions.execution.models import Action, ActionStatus
from core.chains import all_chains
from core.echo import prefix

# ES256 is what a Picnic account verifies on chain (P-256). RS256 is offered too because WebAuthn
# clients expect both defaults (Chromium warns without them); a key of another kind is then
# refused with a clear reason (`unsupported_key`), not an opaque registration failure.
OFFERED_ALGORITHMS = [
    COSEAlgorithmIdentifier.ECDSA_SHA_256,
    COSEAlgorithmIdentifier.RSASSA_PKCS1_v1_5_SHA_256,
]


def registration_options(*, user) -> tuple[str, bytes]:
    challenge = secrets.token_bytes(32)
    options = generate_registration_options(
        rp_id=settings.WEBAUTHN_RP_ID,
        rp_name=settings.WEBAUTHN_RP_NAME,
        user_id=str(user.pk).encode(),
        user_name=user.get_username(),
        challenge=challenge,
        supported_pub_key_algs=OFFERED_ALGORITHMS,
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
    *,
    user,
    credential_json: str,
    expected_challenge: bytes,
    account_address,
    device: dict[str, str] | None = None,
) -> Passkey:
    """Verify a registration and store the credential with the user's Picnic smart account.

    `account_address(qx, qy)` computes the counterfactual account address for the key (the
    first passkey only). A passkey registered once the account exists is `pending`: it signs
    nothing until an owner adds it on chain (a linked device) or a recovery completes.
    `device` is where it was created (user agent, coarse address), for the approval page."""
    try:
        verified = verify_registration_response(
            credential=credential_json,
            expected_challenge=expected_challenge,
            expected_rp_id=settings.WEBAUTHN_RP_ID,
            expected_origin=settings.WEBAUTHN_ORIGIN,
            require_user_verification=True,
            supported_pub_key_algs=OFFERED_ALGORITHMS,
        )
    except InvalidRegistrationResponse as exc:
        raise PasskeyError(
            f"Passkey registration refused: {exc}", code="registration_refused"
        ) from None
    except InvalidJSONStructure as exc:  # not JSON, an array, a field of the wrong type
        raise PasskeyError(
            f"Passkey registration refused: {prefix(str(exc), 200)}", code="unreadable"
        ) from None
    except WebAuthnException as exc:  # well-formed JSON holding undecodable CBOR or key data
        raise PasskeyError(
            f"Passkey registration refused: {prefix(str(exc), 200)}", code="registration_refused"
        ) from None
    key = decode_credential_public_key(verified.credential_public_key)
    if not isinstance(key, DecodedEC2PublicKey):
        raise PasskeyError(
            "Passkey registration refused: only P-256 keys can own a smart account",
            code="unsupported_key",
        )
    transports = []
    try:
        transports = json.loads(credential_json).get("response", {}).get("transports") or []
    except ValueError:
        pass
    has_account = SmartAccount.objects.filter(
        user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False
    ).exists()
    passkey = Passkey.objects.create(
        **(device or {}),
        owner_state=OwnerState.PENDING if has_account else OwnerState.ACTIVE,
        # The key that makes the account is its owner 0 (the constructor's).
        owner_index=None if has_account else 0,
        user=user,
        credential_id=bytes_to_base64url(verified.credential_id),
        public_key=verified.credential_public_key,
        public_key_x="0x" + key.x.hex(),
        public_key_y="0x" + key.y.hex(),
        sign_count=verified.sign_count,
        transports=transports,
    )
    if not has_account:
        # The factory sits at the same CREATE2 address on every chain, so the account has one
        # counterfactual address: a row on each configured chain (deployed by its first op).
        address, factory = account_address(key.x, key.y)
        for chain in all_chains():
            SmartAccount.objects.create(
                user=user,
                kind=SmartAccountKind.PICNIC,
                chain_id=chain.id,
                address=address,
                entry_point_version=settings.ENTRY_POINT_VERSION,
                factory=factory,
                owner=f"passkey:{passkey.credential_id}",
                passkey=passkey,
            )
    return passkey


def smart_accounts_cover_chains(*, user) -> int:
    """Give the user's passkey accounts a row on every configured chain that lacks one (a chain
    added to the table after they registered). Same address, factory and owner: the account is
    counterfactual until its first op there. Returns how many rows it created."""
    rows = list(
        SmartAccount.objects.filter(
            user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False
        ).order_by("created_at", "pk")
    )
    served = {chain.id for chain in all_chains()}
    have = {(row.address.lower(), row.chain_id) for row in rows}
    created = 0
    for row in rows:
        for chain_id in sorted(served):
            if (row.address.lower(), chain_id) in have:
                continue
            _, made = SmartAccount.objects.get_or_create(
                chain_id=chain_id,
                address=row.address,
                defaults={
                    "user": user,
                    "kind": row.kind,
                    "entry_point_version": row.entry_point_version,
                    "factory": row.factory,
                    "owner": row.owner,
                    "passkey": row.passkey,
                    "salt": row.salt,
                },
            )
            have.add((row.address.lower(), chain_id))
            created += made
    return created


def passkey_rename(*, user, passkey_id: int, name: str) -> Passkey:
    passkey = Passkey.objects.filter(pk=passkey_id, user=user).first()
    if passkey is None:
        raise PasskeyError("No such passkey", code="not_found")
    passkey.name = name.strip()[:100]
    passkey.save(update_fields=["name"])
    return passkey


@transaction.atomic
def passkey_remove(*, user, passkey_id: int) -> None:
    """Forget a passkey. Never the one whose key owns a smart account (the account could not
    sign any more: its owner is that key, on chain), nor the last one while an action waits
    for a signature."""

    passkey = Passkey.objects.select_for_update().filter(pk=passkey_id, user=user).first()
    if passkey is None:
        raise PasskeyError("No such passkey", code="not_found")
    owner_of_account = SmartAccount.objects.filter(
        user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False
    ).exists()
    if owner_of_account and passkey.owner_state in (OwnerState.ACTIVE, OwnerState.REMOVING):
        # An owner on chain leaves through a removal signed by another owner (account_changes).
        raise PasskeyError("This passkey is an owner of the account", code="owns_account")
    if passkey.smart_accounts.exists():
        raise PasskeyError("This passkey owns a smart account", code="owns_account")
    if passkey_from_recovery(passkey=passkey) and passkey.owner_state == OwnerState.PENDING:
        # Its recovery refers to it: the recovery is cancelled instead (on every chain).
        raise PasskeyError(
            "This passkey comes from a recovery in progress", code="recovery_passkey"
        )
    others = Passkey.objects.filter(user=user).exclude(pk=passkey.pk)
    pending = Action.objects.filter(user=user, status=ActionStatus.PROPOSED).exists()
    if pending and not others.exists():
        raise PasskeyError("The last passkey while actions are pending", code="last_passkey")
    passkey.delete()
