"""The user's accounts and who owns them: passkeys, smart accounts and the tokens they hold,
the owner changes (add or remove a passkey, recovery) with their lifecycle, device links,
recovery setups and the pages' preferences."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from actions.ramps.models import RampProvider
from core.chains import chain_name
from core.lifecycle import Lifecycle, register
from core.models import LifecycleModel, StatusHistory


class OwnerState(models.TextChoices):
    """A passkey's key among the account's owners on chain (not a lifecycle: it follows the
    account changes that add and remove it)."""

    PENDING = "pending", "Pending"
    ACTIVE = "active", "Active"
    REMOVING = "removing", "Being removed"
    REMOVED = "removed", "Removed"


class Passkey(models.Model):
    """A WebAuthn credential (P-256) registered by a user on our registration page."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passkeys"
    )
    credential_id = models.CharField(max_length=512, unique=True, help_text="base64url")
    public_key = models.BinaryField(help_text="COSE public key")
    public_key_x = models.CharField(max_length=66)
    public_key_y = models.CharField(max_length=66)
    sign_count = models.PositiveBigIntegerField(default=0)
    transports = models.JSONField(default=list, blank=True)
    name = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Where its key stands on chain (the account's owners, by index): a passkey registered
    # after the account exists is `pending` and signs nothing until an owner adds it.
    owner_state = models.CharField(
        max_length=16, choices=OwnerState.choices, default=OwnerState.ACTIVE, db_index=True
    )
    owner_index = models.PositiveIntegerField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)
    # The device it was created on, as the approval page names it: the browser's user agent
    # and a coarse address (the /24 or /48 network), never the full IP.
    user_agent = models.CharField(max_length=300, blank=True, default="")
    ip_coarse = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(owner_state__in=OwnerState.values), name="passkey_owner_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"passkey {self.credential_id[:12]}… of {self.user}"

    @property
    def can_sign(self) -> bool:
        return self.owner_state == OwnerState.ACTIVE and self.owner_index is not None


class Preferences(models.Model):
    """What an end user's pages remember about them: the time zone their browser reports
    (picnic/local_time.js), so times are written in it server-side too, and the language
    their pages were last shown in (e-mails are written in it)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="picnic_preferences"
    )
    time_zone = models.CharField(max_length=64, blank=True)  # an IANA name, checked on write
    # The language of their pages (one of LANGUAGES), for what reaches them elsewhere: e-mail.
    language = models.CharField(max_length=16, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user_id}: {self.time_zone or 'UTC'}"


class Token(models.Model):
    """An ERC-20 the action tools accept (CAIP-19 eip155:<chain>/erc20:<address>)."""

    chain_id = models.PositiveBigIntegerField()
    address = models.CharField(max_length=42)
    symbol = models.CharField(max_length=20)
    name = models.CharField(max_length=100)
    decimals = models.PositiveSmallIntegerField()
    # The price source's id for fiat values (CoinGecko's coin id, e.g. "usd-coin").
    price_id = models.CharField(max_length=100, blank=True)
    # History classification: a fiat e-money token minted/burned by its ramp provider (EURe by
    # Monerium, BRLA by Avenia), or the share token of an ERC-4626 vault over `vault_asset`.
    ramp_provider = models.CharField(max_length=16, blank=True, choices=RampProvider.choices)
    vault_asset = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="vaults"
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["chain_id", "address"], name="token_unique")]

    def __str__(self) -> str:
        return f"{self.symbol} on {chain_name(self.chain_id)}"

    @property
    def asset_id(self) -> str:
        return f"eip155:{self.chain_id}/erc20:{self.address}"


class SmartAccountKind(models.TextChoices):
    PICNIC = "picnic", "Picnic (ERC-4337)"
    GNOSIS_PAY = "gnosisPay", "Gnosis Pay (Safe)"


class SmartAccount(models.Model):
    """A smart account the user controls; actions operate on one of them."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="smart_accounts"
    )
    kind = models.CharField(max_length=16, choices=SmartAccountKind.choices)
    chain_id = models.PositiveBigIntegerField()
    address = models.CharField(max_length=42)
    entry_point_version = models.CharField(max_length=4, blank=True)
    factory = models.CharField(max_length=42, blank=True)
    # Who signs for it: "passkey:<credential id>", or "eoa:<address>" for the local stack's
    # SimpleAccount used by demo data.
    owner = models.CharField(max_length=200)
    passkey = models.ForeignKey(
        Passkey, null=True, blank=True, on_delete=models.PROTECT, related_name="smart_accounts"
    )
    salt = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    # Transaction history: the last block whose Transfer logs are in TokenTransfer.
    history_synced_block = models.BigIntegerField(default=-1)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chain_id", "address"], name="smart_account_unique"),
            models.CheckConstraint(
                condition=Q(kind__in=SmartAccountKind.values), name="smart_account_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.address} on {chain_name(self.chain_id)}"


class AccountChangeKind(models.TextChoices):
    ADD_OWNER = "add_owner", "Add an owner"
    REMOVE_OWNER = "remove_owner", "Remove an owner"
    SET_RECOVERY = "set_recovery", "Set the recovery key"
    RECOVERY = "recovery", "Recovery"
    CANCEL_RECOVERY = "cancel_recovery", "Cancel a recovery"


class AccountChangeStatus(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    SIGNED = "signed", "Signed"
    SUBMITTED = "submitted", "Submitted"
    WAITING = "waiting", "Waiting for the delay"
    EXECUTED = "executed", "Executed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


C = AccountChangeStatus
# A change to who owns the account, on every configured chain at once: proposed (the user ops
# are built) → signed (one passkey prompt covers every chain) → submitted (delivered to each
# chain's bundler) → executed once every chain has it, or failed. A recovery is relayed by the
# server from the recovery code (proposed → submitted) and then waits for its on-chain delay
# (waiting → executed), unless an owner cancels it first. A proposal left unsigned for
# ACCOUNT_CHANGE_EXPIRY_SECONDS is expired (proposed → expired); nothing later ever is.
ACCOUNT_CHANGE_LIFECYCLE = register(
    Lifecycle(
        name="accountChange",
        model_label="actions.AccountChange",
        history_label="actions.AccountChangeHistory",
        moves={
            C.PROPOSED: frozenset({C.SIGNED, C.SUBMITTED, C.CANCELLED, C.FAILED, C.EXPIRED}),
            C.SIGNED: frozenset({C.SUBMITTED, C.FAILED}),
            C.SUBMITTED: frozenset({C.EXECUTED, C.WAITING, C.FAILED}),
            C.WAITING: frozenset({C.EXECUTED, C.CANCELLED, C.FAILED}),
            C.EXECUTED: frozenset(),
            C.FAILED: frozenset(),
            C.CANCELLED: frozenset(),
            C.EXPIRED: frozenset(),
        },
        timestamps={C.SIGNED: "signed_at", C.SUBMITTED: "submitted_at", C.EXECUTED: "executed_at"},
        history_fk="change",
        timeline_url_name="actions-staff:account-change-timeline",
        stuck_selector="actions.accounts.selectors.account_changes_stuck",
    )
)
ACCOUNT_CHANGE_OPEN = (C.PROPOSED, C.SIGNED, C.SUBMITTED, C.WAITING)


class AccountChange(LifecycleModel):
    """A change to the owners of the user's Picnic account (the same address on every chain):
    one user operation per configured chain (`ops`), signed with one passkey prompt."""

    lifecycle = ACCOUNT_CHANGE_LIFECYCLE

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16, choices=AccountChangeKind.choices)
    status = models.CharField(
        max_length=16, choices=AccountChangeStatus.choices, default=C.PROPOSED, db_index=True
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account_changes"
    )
    account = models.CharField(max_length=42, db_index=True)
    # The passkey added or removed (a recovery: the new one); the one that signed the change.
    passkey = models.ForeignKey(
        Passkey, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes"
    )
    signer = models.ForeignKey(
        Passkey, null=True, blank=True, on_delete=models.SET_NULL, related_name="signed_changes"
    )
    # A cancellation names the recovery it cancels.
    target = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="cancellations"
    )
    # Per chain: {"chain_id", "entry_point", "user_op", "user_op_hash", "tx_hash", "done"}.
    ops = models.JSONField(default=list, blank=True)
    # What the passkey signs: keccak256(abi.encode(every op hash)), one prompt for all chains.
    challenge = models.CharField(max_length=66, blank=True, default="")
    params = models.JSONField(default=dict, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True, help_text="A recovery's readyAt")
    error = models.TextField(null=True, blank=True)
    signed_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    executed_at = models.DateTimeField(null=True, blank=True)
    # Since when some chain has the change and another has not yet (one was down): the
    # worker re-sends the missing chain's op, and staff see it as stuck, until it is whole.
    behind_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=["status", "updated_at"], name="account_change_status_updated")
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=AccountChangeStatus.values),
                name="account_change_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=AccountChangeKind.values), name="account_change_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.id} ({self.status})"


class AccountChangeHistory(StatusHistory):
    change = models.ForeignKey(AccountChange, on_delete=models.CASCADE, related_name="history")

    class Meta(StatusHistory.Meta):
        verbose_name_plural = "account change history"


class DeviceLink(models.Model):
    """ "Add a device": a short-lived, one-use link from a signed-in device. Only a hash of its
    token is kept; opening it (by the same user) binds the next passkey registered in that
    session to it."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="device_links"
    )
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    opened_at = models.DateTimeField(null=True, blank=True)
    passkey = models.OneToOneField(
        Passkey, null=True, blank=True, on_delete=models.SET_NULL, related_name="device_link"
    )

    def __str__(self) -> str:
        return f"device link of {self.user} until {self.expires_at:%H:%M}"


class RecoverySetup(models.Model):
    """The user's recovery key: only its address (derived from the recovery code, which is
    shown once and kept nowhere) and the on-chain delay. `change` sets it on chain."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="recovery_setup"
    )
    account = models.CharField(max_length=42)
    recovery_address = models.CharField(max_length=42)
    delay_seconds = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    change = models.ForeignKey(
        AccountChange, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def __str__(self) -> str:
        return f"recovery key {self.recovery_address} of {self.user}"
