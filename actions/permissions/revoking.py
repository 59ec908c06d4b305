"""Revoking spending permissions: by the user, when the agent is disconnected, when the user is
deactivated; one `spendRevoke` action per account, the session keys destroyed at once."""

from __future__ import annotations

from django.db import transaction
from django.urls import reverse

from actions.accounts.models import SmartAccount
from actions.evm_clients import on_chain, tool_web3
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionType
from actions.execution.public import AGENT_DISCONNECTED, action_create
from actions.permissions.follow import P, spend_permission_destroy_key, spend_permission_follow
from actions.permissions.grants import agent_name
from actions.permissions.models import (
    SPEND_PERMISSION_LIFECYCLE,
    SPEND_PERMISSION_LIVE,
    SpendPermission,
)
from actions.tool_requests.public import op_with_gas, passkey_client
from core.chains import get_chain
from core.lifecycle import Actor, IllegalTransition, transition
from evm import spend_permission as chain_permission


def spend_permissions_revoke(
    *, user, permission_ids, actor: Actor, why: str, withdrawn: str = ""
) -> list[Action]:
    """Destroy the keys at once, then propose one revocation per chain (one user operation
    calling `revokePermission` for each, batched) for the permissions granted on chain. A grant
    not yet signed is withdrawn instead. Returns the revoke actions to sign."""
    permissions = list(
        SpendPermission.objects.select_related("account__passkey", "application", "token")
        .filter(user=user, pk__in=list(permission_ids))
        .exclude(status__in=(P.REVOKED, P.EXPIRED, P.DECLINED, P.FAILED))
    )
    on_chain_now: dict[int, list[SpendPermission]] = {}
    for permission in permissions:
        with transaction.atomic():
            spend_permission_destroy_key(permission=permission, actor=actor, why=why)
        if permission.status == P.REQUESTED and permission.grant_action_id:
            grant = permission.grant_action
            try:
                transition(
                    lifecycle=ACTION_LIFECYCLE,
                    pk=grant.pk,
                    to=ActionStatus.REJECTED,
                    actor=actor,
                    only_from={ActionStatus.PROPOSED},
                    # `withdrawn` (a code) is what the grant's signing page says happened.
                    updates={"params": {**grant.params, "withdrawn": withdrawn}}
                    if withdrawn
                    else None,
                    detail=f"withdrawn: {why}",
                )
            except IllegalTransition:
                pass
            spend_permission_follow(permission)
            continue
        if permission.status in (P.ACTIVE, P.REVOKING):
            on_chain_now.setdefault(permission.chain_id, []).append(permission)
    return [
        _revoke_action(user=user, permissions=group, actor=actor) for group in on_chain_now.values()
    ]


def _revoke_action(*, user, permissions: list[SpendPermission], actor: Actor) -> Action:
    account: SmartAccount = permissions[0].account
    chain = get_chain(account.chain_id)
    calls = [chain_permission.revoke_data(permission_id=p.permission_id) for p in permissions]
    params = {
        "permission_ids": [p.permission_id for p in permissions],
        "names": [p.name for p in permissions],
    }
    with on_chain(chain):
        client = passkey_client(tool_web3(chain.id), account)
        call = (
            client.execute(client.address, 0, calls[0])
            if len(calls) == 1
            else client.execute_batch([(client.address, 0, c) for c in calls])
        )
        op = op_with_gas(client, call, params, chain=chain)
    names = ", ".join(f"“{p.name}” ({agent_name(p.application)})" for p in permissions)
    with transaction.atomic():
        action = action_create(
            user=user,
            application=permissions[0].application,
            type=ActionType.SPEND_REVOKE,
            summary=f"Revoke the spending permission{'s' if len(permissions) > 1 else ''} {names}",
            chain_id=chain.id,
            smart_account=account.address,
            params=params,
            user_op=op,
            entry_point_version=account.entry_point_version,
            actor=actor,
        )
        for permission in permissions:
            if permission.status == P.ACTIVE:
                transition(
                    lifecycle=SPEND_PERMISSION_LIFECYCLE,
                    pk=permission.pk,
                    to=P.REVOKING,
                    actor=actor,
                    expected=P.ACTIVE,
                    updates={"revoke_action": action},
                    detail="revocation proposed: waiting for the user's passkey",
                )
            else:
                SpendPermission.objects.filter(pk=permission.pk).update(revoke_action=action)
        if len(permissions) == 1:
            Action.objects.filter(pk=action.pk).update(spend_permission=permissions[0])
    return action


def spend_permissions_agent_disconnected(*, user, application_id) -> list[Action]:
    """The user disconnected an agent: its keys destroyed, its grants revoked."""
    ids = SpendPermission.objects.filter(
        user=user, application_id=application_id, status__in=(*SPEND_PERMISSION_LIVE, P.REVOKING)
    ).values_list("pk", flat=True)
    return spend_permissions_revoke(
        user=user,
        permission_ids=list(ids),
        actor=Actor.end_user(user),
        why="the user disconnected the agent",
        withdrawn=AGENT_DISCONNECTED,
    )


def spend_permissions_user_deactivated(*, user, actor: Actor, why: str) -> list[Action]:
    """The user was deactivated: every key of theirs destroyed now, every grant withdrawn or
    its revocation proposed (signed with the passkey if they come back; the keys are gone
    whatever happens to it)."""
    ids = SpendPermission.objects.filter(
        user=user, status__in=(*SPEND_PERMISSION_LIVE, P.REVOKING)
    ).values_list("pk", flat=True)
    return spend_permissions_revoke(user=user, permission_ids=list(ids), actor=actor, why=why)


def revoke_sign_path(action: Action) -> str:
    return reverse("sign", args=[action.pk])
