"""Reads of the user's accounts from the database: smart accounts, tokens, passkeys, owner
changes, the recovery setup."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from actions.accounts.models import (
    AccountChange,
    AccountChangeKind,
    AccountChangeStatus,
    OwnerState,
    Passkey,
    RecoverySetup,
    SmartAccount,
    SmartAccountKind,
    Token,
)


def smart_accounts_for_user(*, user) -> list:
    """The accounts the user's passkey controls: Picnic (ERC-4337) accounts it signs for, and
    Gnosis Pay Safes those accounts own."""
    picnic = list(
        SmartAccount.objects.filter(
            user=user, kind=SmartAccountKind.PICNIC, passkey__isnull=False
        ).order_by("created_at", "pk")
    )
    owners = [f"account:{a.address}" for a in picnic]
    safes = list(
        SmartAccount.objects.filter(
            user=user, kind=SmartAccountKind.GNOSIS_PAY, owner__in=owners
        ).order_by("created_at", "pk")
    )
    return picnic + safes


def tokens_on_chains(*, chain_ids: set[int]) -> list[Token]:
    return list(
        Token.objects.filter(chain_id__in=chain_ids)
        .select_related("vault_asset")
        .order_by("symbol")
    )


def passkeys_for_user(*, user) -> QuerySet[Passkey]:
    """The passkeys page's list, oldest first, each with whether its key owns an account and,
    for a passkey a recovery proposed, that recovery's id, start and ready time."""

    owns = SmartAccount.objects.filter(passkey=OuterRef("pk"))
    recovery = AccountChange.objects.filter(
        passkey=OuterRef("pk"), kind=AccountChangeKind.RECOVERY
    ).order_by("-created_at")
    return (
        Passkey.objects.filter(user=user)
        .annotate(
            owns_account=Exists(owns),
            recovery_id=Subquery(recovery.values("pk")[:1]),
            recovery_status=Subquery(recovery.values("status")[:1]),
            recovery_started_at=Subquery(recovery.values("created_at")[:1]),
            recovery_ready_at=Subquery(recovery.values("ready_at")[:1]),
        )
        .order_by("created_at", "pk")
    )


def passkey_from_recovery(*, passkey: Passkey) -> bool:
    """Whether a recovery proposed this passkey: it becomes an owner only through that
    recovery's time-locked executeRecovery, never through an add-owner approval."""
    return AccountChange.objects.filter(passkey=passkey, kind=AccountChangeKind.RECOVERY).exists()


def approving_passkey_count(*, user) -> int:
    """How many of the user's passkeys can approve a payment now: only keys that are owners on
    chain (pending ones sign nothing yet; removed and being-removed ones no longer may)."""
    return Passkey.objects.filter(user=user, owner_state=OwnerState.ACTIVE).count()


def end_user_accounts(*, user) -> QuerySet[SmartAccount]:
    """The accounts an end user has: their passkey accounts and card Safes, never the demo
    SimpleAccount (an EOA-owned account the local stack seeds, not something they hold)."""
    return SmartAccount.objects.filter(user=user).filter(
        Q(passkey__isnull=False) | Q(kind=SmartAccountKind.GNOSIS_PAY)
    )


def account_changes_for_user(*, user, limit: int = 20) -> list[AccountChange]:
    """The passkeys page's list of changes to the account, newest first."""
    return list(
        AccountChange.objects.filter(user=user)
        .select_related("passkey")
        .order_by("-created_at")[:limit]
    )


def recovery_setup_of(*, user) -> RecoverySetup | None:
    return RecoverySetup.objects.filter(user=user).first()


def account_changes_stuck(
    *, minutes: int | None = None, now: datetime | None = None
) -> QuerySet[AccountChange]:
    """Signed or submitted and unchanged for a while (a bundler that never included the ops),
    applied on one chain and missing on another, or waiting well past a recovery's readyAt: what staff should look at. They only look:
    the account's owners sign and cancel, the chain enforces the delay."""
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=minutes or settings.ACTIONS_STUCK_AFTER_MINUTES)
    return AccountChange.objects.filter(
        Q(
            status__in=(AccountChangeStatus.SIGNED, AccountChangeStatus.SUBMITTED),
            updated_at__lt=cutoff,
        )
        | Q(status=AccountChangeStatus.WAITING, ready_at__lt=cutoff)
        # On some chains and not yet on another (one was down): stuck until it is whole.
        | Q(status=AccountChangeStatus.SUBMITTED, behind_since__isnull=False)
    )
