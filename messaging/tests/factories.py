"""Messaging's test data, made through its services: shared by every app's tests (the console
lists these deliveries, the MCP adapter follows them)."""

from __future__ import annotations

import uuid

from core.lifecycle import Actor
from messaging.models import Delivery, Membership, Provider, Role, SocialAccount, Workspace
from messaging.services import delivery_send, delivery_transition

# The social accounts' credential reference names this environment variable; a test sets it
# (monkeypatch.setenv) to the token the local X server expects.
TOKEN_ENV = "PICNIC_TEST_X_TOKEN"
X_TOKEN = "x-user-token-for-tests"


def make_social_account(
    *, workspace: Workspace | None = None, member=None, handle: str = "acme"
) -> SocialAccount:
    """An X account of `workspace` (a new one if None), `member` joined to it as an agent."""
    workspace = workspace or Workspace.objects.create(name="Acme growth")
    if member is not None:
        Membership.objects.get_or_create(
            workspace=workspace, user=member, defaults={"role": Role.AGENT}
        )
    return SocialAccount.objects.create(
        workspace=workspace, provider=Provider.X, handle=handle, credential_ref=f"env:{TOKEN_ENV}"
    )


def make_delivery(
    *steps: str,
    user,
    application,
    social_account: SocialAccount,
    text: str = "hello",
    recipient_id: str = "55",
    **updates,
) -> Delivery:
    """A DM queued by `user` as the API would, then moved through `steps` by the worker;
    `updates[step]` are the values written with that step."""
    delivery = delivery_send(
        user=user,
        application=application,
        workspace_id=social_account.workspace_id,
        social_account_id=social_account.pk,
        recipient_id=recipient_id,
        text=text,
        idempotency_key=uuid.uuid4(),
    ).delivery
    for step in steps:
        delivery_transition(
            delivery_id=delivery.pk, to=step, actor=Actor.worker(), updates=updates.pop(step, None)
        )
    return Delivery.objects.get(pk=delivery.pk)
