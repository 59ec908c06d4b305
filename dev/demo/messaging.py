"""Demo data for `manage.py seed_demo`: a workspace, a social account and DM deliveries.

The deliveries go through the real worker and the local X DM server that `make run` starts;
their text markers make that server refuse or hang, so every outcome shows up.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from messaging.models import Membership, Provider, Role, SocialAccount, Workspace
from messaging.services import delivery_send

DEMO_TOKEN_ENV = "PICNIC_DEMO_X_TOKEN"
DEMO_TOKEN_DEFAULT = "local-demo-x-token"
WORKSPACE_ID = uuid.uuid5(uuid.NAMESPACE_URL, "picnic-demo/workspace")
MESSAGES = {
    "sent": "Hi! Your Picnic card is on its way.",
    "failed": "[refuse] This recipient does not accept DMs.",
    "unknown": "[hang] The provider never answers this one.",
}


def seed_messaging(*, user, application, say: Callable[[str], None]) -> None:
    workspace, _ = Workspace.objects.get_or_create(
        pk=WORKSPACE_ID, defaults={"name": "Picnic demo"}
    )
    Membership.objects.get_or_create(workspace=workspace, user=user, defaults={"role": Role.OWNER})
    account, _ = SocialAccount.objects.get_or_create(
        workspace=workspace,
        provider=Provider.X,
        handle="picnic_demo",
        defaults={"credential_ref": f"env:{DEMO_TOKEN_ENV}"},
    )
    for name, text in MESSAGES.items():
        result = delivery_send(
            user=user,
            application=application,
            workspace_id=workspace.pk,
            social_account_id=account.pk,
            recipient_id="1000000001",
            text=text,
            idempotency_key=uuid.uuid5(uuid.NAMESPACE_URL, f"picnic-demo/dm/{name}"),
        )
        say(f"DM {result.delivery.pk} (expected {name}): {result.delivery.status}")
    say(f"workspace {workspace.pk}, social account {account.pk} (@{account.handle})")
