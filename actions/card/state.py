"""Card state: freezing and unfreezing a Gnosis Pay card (off chain). The passkey signs a SIWE
message for the card's Safe (EIP-1271); Gnosis Pay exchanges it for a short-lived session token
that freezes or unfreezes the card. The token is kept for reconciliation and card purchases."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from actions.accounts.models import SmartAccount
from actions.card.models import GnosisPaySession
from actions.card.selectors import gnosis_pay_session_token
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.public import ActionKind, ReconcileOutcome, action_record_error, action_touch
from actions.providers.gnosis_pay import (
    Conflict,
    GnosisPayClient,
    GnosisPayError,
    Unavailable,
    jwt_expiry,
)
from core.lifecycle import Actor, transition
from evm.safe_signature import contract_signature


def gnosis_pay_client(timeout: float | None = None):
    return GnosisPayClient(
        settings.GNOSIS_PAY_URL, timeout=timeout or settings.GNOSIS_PAY_TIMEOUT_SECONDS
    )


def card_action_submit(*, action_id) -> Action:
    """signed → submitted → SIWE sign-in (EIP-1271 on the Safe) → freeze/unfreeze → executed.

    Gnosis Pay down or slow: the action stays `submitted` with the error; reconciliation checks
    the card's status later with the same short-lived token (freezing is idempotent)."""

    action = transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action_id,
        to=ActionStatus.SUBMITTED,
        actor=Actor.worker(),
        detail="signing in to Gnosis Pay with the signed SIWE message",
        only_from={ActionStatus.SIGNED},
    )
    client = gnosis_pay_client()
    try:
        token = client.challenge(
            message=action.params["siwe_message"], signature=action.params["siwe_signature"]
        )
    except Unavailable as exc:
        return action_record_error(action, f"{exc}")
    except GnosisPayError as exc:
        return _card_failed(action, f"Gnosis Pay refused the sign-in: {exc}", exc)
    # In the database: reconciliation (any process) and the purchase history use it too.
    gnosis_pay_session_store(safe_address=action.smart_account, token=token)
    try:
        client.set_frozen(
            card_id=action.params["card_id"], frozen=action.params["frozen"], token=token
        )
    except Conflict:
        pass  # already in the requested state: the status below decides
    except Unavailable as exc:
        return action_record_error(action, str(exc))
    except GnosisPayError as exc:
        return _card_failed(action, str(exc), exc)
    return _card_settle(action, client, token)


def gnosis_pay_session_store(
    *, safe_address: str, token: str, now: datetime | None = None
) -> GnosisPaySession:
    """Keep a sign-in's JWT for the Safe until it expires (its `exp`, else 50 minutes)."""

    now = now or timezone.now()
    session, _ = GnosisPaySession.objects.update_or_create(
        safe_address=safe_address.lower(),
        defaults={
            "token": token,
            "expires_at": jwt_expiry(token) or now + timedelta(minutes=50),
            "created_at": now,
        },
    )
    return session


def _card_failed(action: Action, message: str, exc) -> Action:
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.FAILED,
        actor=Actor.worker(),
        only_from={ActionStatus.SUBMITTED},
        updates={"error": message},
        detail=str(exc),
        payload=exc.payload,
    )


def _card_settle(action: Action, client, token: str) -> Action:
    try:
        status = client.status(card_id=action.params["card_id"], token=token)
    except GnosisPayError as exc:
        return action_record_error(action, str(exc))
    if status.is_frozen != action.params["frozen"]:
        return action_record_error(
            action, f"card status says isFrozen={status.is_frozen} after the request"
        )
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.EXECUTED,
        actor=Actor.worker(),
        only_from={ActionStatus.SUBMITTED},
        updates={"error": None},
        payload=status.raw,
        detail=f"card •••• {action.params['last4']} is now {'frozen' if status.is_frozen else 'active'}",
    )


def card_action_reconcile(*, action: Action) -> ReconcileOutcome:
    token = gnosis_pay_session_token(safe_address=action.smart_account)
    if token is None:
        # The SIWE nonce was single use: only a new signature signs in again. Staff decide.
        action_touch(
            action_id=action.pk,
            last_reconcile_error="no live Gnosis Pay session for the card's Safe: a new signature is needed",
        )
        return ReconcileOutcome.UNAVAILABLE
    # Same bound as the bundler: this runs inside get_action_status too.
    client = gnosis_pay_client(timeout=settings.BUNDLER_TIMEOUT_SECONDS)
    try:
        client.set_frozen(
            card_id=action.params["card_id"], frozen=action.params["frozen"], token=token
        )
    except Conflict:
        pass
    except GnosisPayError as exc:
        action_record_error(action, str(exc))
        action_touch(action_id=action.pk, last_reconcile_error=str(exc)[:2000])
        return ReconcileOutcome.UNAVAILABLE
    action_touch(action_id=action.pk, last_reconcile_error="")
    settled = _card_settle(action, client, token)
    return (
        ReconcileOutcome.EXECUTED
        if settled.status == ActionStatus.EXECUTED
        else ReconcileOutcome.PENDING
    )


def card_action_signed_updates(*, action: Action, account: SmartAccount, signature: str) -> dict:
    """The Safe checks its owner's signature (EIP-1271): wrap the passkey account's."""

    safe_signature = contract_signature(
        owner=account.address, owner_signature=bytes.fromhex(signature[2:])
    )
    return {"params": {**action.params, "siwe_signature": safe_signature}}


class CardState(ActionKind):
    """A Gnosis Pay request, signed in with SIWE for the card's Safe: no transaction."""

    signed_note = "Signed by the user; sending the request to Gnosis Pay."

    def in_flight_note(self, status):
        return "Sent to Gnosis Pay; waiting for it to confirm the card's state."

    def signed_updates(self, action, *, account, signature):
        return card_action_signed_updates(action=action, account=account, signature=signature)

    def send(self, *, action_id, client=None):
        return card_action_submit(action_id=action_id)

    def reconcile(self, action, *, actor, client=None, note="", force_resend=False):
        return card_action_reconcile(action=action)
