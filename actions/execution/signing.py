"""Signing, the second step of an action's lifecycle: the user signs a `proposed` action with
their passkey on the signing page (or rejects it). The challenge of a 4337 action is its
userOpHash: the assertion the browser returns is what the smart account verifies on chain, so
the server verifies exactly that, once, before submitting. How the signature is stored depends
on the action's kind (`kinds.KINDS`)."""

from __future__ import annotations

from django.db import transaction

from actions.accounts.models import Passkey, SmartAccount
from actions.accounts.public import count_use, passkey_request, verify_signer
from actions.errors import PasskeyError
from actions.execution.kinds import kind_of
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionType
from actions.execution.services import action_expire_if_overdue, swap_quote_bounded
from core.lifecycle import Actor, IllegalTransition, enqueue_on_commit, transition
from evm.signature import pack_owner_signature

# params["withdrawn"] of a proposal the user's disconnection of its agent withdrew: its
# signing page says so, and signing it is refused with this code.
AGENT_DISCONNECTED = "agent_disconnected"
# Ended with their spending permission (spend_permissions), not here: a grant withdrawn, and
# the user's own revocations (they are what the disconnection asks the user to sign).
_NOT_WITHDRAWN_HERE = (ActionType.SPEND_GRANT, ActionType.SPEND_REVOKE)


def _refuse_withdrawn(action: Action) -> None:
    if action.status == ActionStatus.REJECTED and action.params.get("withdrawn") == (
        AGENT_DISCONNECTED
    ):
        raise PasskeyError(
            "This request was withdrawn: the agent that asked for it was disconnected",
            code=AGENT_DISCONNECTED,
        )


def actions_withdraw_for_agent(*, user, application_id) -> list[Action]:
    """The user disconnected an agent: its proposals still waiting for a signature end
    `rejected` (withdrawn, saying why on their pages). One signed meanwhile goes on: the
    user approved it with their passkey before the disconnection."""
    proposals = Action.objects.filter(
        user=user, application_id=application_id, status=ActionStatus.PROPOSED
    ).exclude(type__in=_NOT_WITHDRAWN_HERE)
    withdrawn = []
    for action in proposals:
        try:
            withdrawn.append(
                transition(
                    lifecycle=ACTION_LIFECYCLE,
                    pk=action.pk,
                    to=ActionStatus.REJECTED,
                    actor=Actor.end_user(user),
                    only_from={ActionStatus.PROPOSED},
                    updates={"params": {**action.params, "withdrawn": AGENT_DISCONNECTED}},
                    detail="withdrawn: the agent was disconnected",
                )
            )
        except IllegalTransition:
            continue  # signed or expired meanwhile: it stays as it is
    return withdrawn


def on_agent_disconnected(sender, *, user, application_id, **kwargs) -> None:
    """Receiver of core.agents.agent_disconnected."""
    actions_withdraw_for_agent(user=user, application_id=application_id)


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
    _refuse_withdrawn(action)
    _signing_account(action)  # the action has a passkey account (or no_passkey)
    return passkey_request(
        challenge=action_challenge(action), allowed=_signers(action).order_by("pk")
    )


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
    _refuse_withdrawn(action)
    if action.status != ActionStatus.PROPOSED:
        raise PasskeyError(
            f"This action can no longer be signed: it is {action.status}", code="not_proposed"
        )
    account = _signing_account(action)
    # Any owner of the account signs, naming its index; a removed, pending or departing
    # passkey is refused here, in plain words, before anything reaches the chain.
    passkey, credential, verified = verify_signer(
        user=action.user, credential_json=credential_json, challenge=action_challenge(action)
    )
    # The index it was added at: every owner change applies on every chain, so it is the
    # same on each (accounts.change_delivery._apply checks that).
    signature = pack_owner_signature(
        owner_index=passkey.owner_index,
        authenticator_data=credential.response.authenticator_data,
        client_data_json=credential.response.client_data_json,
        signature_der=credential.response.signature,
    )
    with transaction.atomic():
        count_use(passkey, verified)
        try:
            action = transition(
                lifecycle=ACTION_LIFECYCLE,
                pk=action.pk,
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
            _refuse_withdrawn(Action.objects.get(pk=action.pk))  # withdrawn while signing
            raise PasskeyError(
                f"This action can no longer be signed: it is {exc.current}", code="not_proposed"
            ) from None
        enqueue_on_commit("actions.tasks.action_submit_task", action.pk)
    return action


def action_reject(*, action_id, user) -> Action:
    action = action_expire_if_overdue(action=Action.objects.get(pk=action_id, user=user))
    try:
        return transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=ActionStatus.REJECTED,
            actor=Actor.end_user(user),
            only_from={ActionStatus.PROPOSED},
            detail="user declined on the signing page",
        )
    except IllegalTransition as exc:
        raise PasskeyError(
            f"This action can no longer be rejected: it is {exc.current}", code="not_proposed"
        ) from None
