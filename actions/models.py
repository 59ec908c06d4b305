from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from core.chains import chain_name
from core.lifecycle import Lifecycle, register
from core.models import LifecycleModel, StatusHistory


class ActionType(models.TextChoices):
    TRANSFER = "transfer", "Transfer"
    SWAP = "swap", "Swap"
    CARD_FREEZE = "cardFreeze", "Card freeze"
    CARD_UNFREEZE = "cardUnfreeze", "Card unfreeze"
    CARD_LIMIT_SET = "cardLimitSet", "Card daily limit"
    SPEND_GRANT = "spendGrant", "Spending permission"
    SPEND_REVOKE = "spendRevoke", "Spending permission revoked"


class ActionStatus(models.TextChoices):
    PROPOSED = "proposed", _("Proposed")
    SIGNED = "signed", _("Signed")
    SUBMITTED = "submitted", _("Submitted")
    BROADCAST = "broadcast", _("Broadcast")
    EXECUTED = "executed", _("Executed")
    FAILED = "failed", _("Failed")
    EXPIRED = "expired", _("Expired")
    REJECTED = "rejected", _("Rejected")


S = ActionStatus
# The seed's lifecycle: proposed → signed → submitted → broadcast → executed, with failed
# (on-chain revert), expired (TTL before signing) and rejected (declined) as the other terminal
# states. Reconciliation may find the receipt of a `submitted` action directly. `failed` is also
# where a refusal that makes execution impossible ends (the bundler refused the signed op for
# good, its nonce went to another op) — the only terminal status that says "did not happen";
# `error` says which. Staff may mark a `signed` action failed (its submission never started).
ACTION_LIFECYCLE = register(
    Lifecycle(
        name="action",
        model_label="actions.Action",
        history_label="actions.ActionStatusHistory",
        moves={
            S.PROPOSED: frozenset({S.SIGNED, S.EXPIRED, S.REJECTED}),
            S.SIGNED: frozenset({S.SUBMITTED, S.FAILED}),
            S.SUBMITTED: frozenset({S.BROADCAST, S.EXECUTED, S.FAILED}),
            S.BROADCAST: frozenset({S.EXECUTED, S.FAILED}),
            S.EXECUTED: frozenset(),
            S.FAILED: frozenset(),
            S.EXPIRED: frozenset(),
            S.REJECTED: frozenset(),
        },
        timestamps={S.SIGNED: "signed_at", S.BROADCAST: "broadcast_at", S.EXECUTED: "executed_at"},
        history_fk="action",
        resource_uri_template="picnic://action/{id}",
        timeline_url_name="actions-staff:action-timeline",
        stuck_selector="actions.selectors.actions_stuck",
    )
)
PENDING_ON_CHAIN = (S.SUBMITTED, S.BROADCAST)
# The status-history rows of a cross-chain swap's second leg (actions/services/bridges.py)
# keep the status (`executed` → `executed`) and say what the bridge did after this prefix.
LEG_DETAIL = "destination leg: "
# Signed by the user, not yet ended: what staff may resolve, and what "stuck" looks at.
IN_FLIGHT = (S.SIGNED, *PENDING_ON_CHAIN)


class Action(LifecycleModel):
    lifecycle = ACTION_LIFECYCLE

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    type = models.CharField(max_length=16, choices=ActionType.choices)
    status = models.CharField(
        max_length=16, choices=ActionStatus.choices, default=ActionStatus.PROPOSED, db_index=True
    )
    summary = models.TextField(help_text="What the user sees on the signing page.")
    chain_id = models.PositiveBigIntegerField()
    smart_account = models.CharField(max_length=42, db_index=True)

    # Owner: the user and the OAuth client (agent) that created the action.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="picnic_actions"
    )
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        on_delete=models.PROTECT,
        related_name="picnic_actions",
    )

    params = models.JSONField(default=dict, blank=True, help_text="The tool call's parameters.")
    user_op = models.JSONField(
        null=True, blank=True, help_text="ERC-4337 user operation (bundler RPC field names)."
    )
    entry_point = models.CharField(max_length=42, blank=True)
    entry_point_version = models.CharField(max_length=4, blank=True)
    user_op_hash = models.CharField(max_length=66, null=True, blank=True, db_index=True)
    tx_hash = models.CharField(max_length=66, null=True, blank=True, db_index=True)
    block_number = models.PositiveBigIntegerField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)

    # Its own created_at (indexed: retention and the admin sort on it); updated_at is inherited.
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField()
    signed_at = models.DateTimeField(null=True, blank=True)
    broadcast_at = models.DateTimeField(null=True, blank=True)
    executed_at = models.DateTimeField(null=True, blank=True)

    # Reconciliation bookkeeping for support staff (not part of the status contract).
    last_reconciled_at = models.DateTimeField(null=True, blank=True)
    last_reconcile_error = models.TextField(blank=True, default="")
    # Deliveries of the signed user operation to the bundler (the first one included), and when
    # reconciliation may send the same op again (backoff, or a check that the bundler kept it).
    submit_attempts = models.PositiveIntegerField(default=0)
    next_submit_at = models.DateTimeField(null=True, blank=True)
    # A grant or revocation of a spending permission, or a transfer signed under one (by its
    # session key, with no passkey prompt).
    spend_permission = models.ForeignKey(
        "SpendPermission",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="actions",
    )

    class Meta:
        ordering = ("-created_at",)
        permissions = [
            ("resolve_action", "Can mark in-flight actions failed or re-send them"),
            ("reconcile_action", "Can reconcile actions now (ask the bundler for the receipt)"),
        ]
        indexes = [
            models.Index(fields=["status", "updated_at"], name="action_status_updated"),
            # The console's search by owner: a user's newest first, read only up to its limit
            # (on user_id alone every row of the user is fetched and sorted).
            models.Index(fields=["user", "-created_at"], name="action_user_created"),
            # The console's search by a transfer's recipient and its ENS name (selectors read
            # these exact expressions: params->>'to', params->>'ens').
            models.Index(KeyTextTransform("to", "params"), name="action_params_to"),
            models.Index(KeyTextTransform("ens", "params"), name="action_params_ens"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ActionStatus.values), name="action_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(type__in=ActionType.values), name="action_type_valid"
            ),
            # tx_hash and block_number arrive together with the receipt.
            models.CheckConstraint(
                condition=Q(tx_hash__isnull=True, block_number__isnull=True)
                | Q(tx_hash__isnull=False, block_number__isnull=False),
                name="action_receipt_fields_together",
            ),
            # A user operation is executed only with its receipt; card actions settle off-chain.
            models.CheckConstraint(
                condition=~Q(status=ActionStatus.EXECUTED)
                | Q(tx_hash__isnull=False)
                | Q(user_op_hash__isnull=True),
                name="action_executed_has_tx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_type_display()} {self.id} ({self.status})"

    @property
    def transitions(self) -> list:
        """The status history without staff audit rows that moved nothing (a re-send): the
        seed's `status_history` is the trail of transitions, and of a cross-chain swap's
        destination leg (rows that keep `executed`, detail "destination leg: …"). Uses the history read with the
        action (`selectors.action_status_for_client`: `StatusRow`s, the fields the answer
        shows) or a prefetched `history` (model instances)."""
        rows = self.__dict__.get("preloaded_history")
        if rows is None:
            rows = self.history.all()
        return [
            row
            for row in rows
            if row.from_status != row.status or (row.detail or "").startswith(LEG_DETAIL)
        ]


class BridgeLeg(models.Model):
    """The destination leg of a cross-chain swap, tracked next to its action.

    The action follows the seed: `executed` when the source transaction is mined. What the
    bridge then does on the destination chain is here (LI.FI's own words: `status`,
    `substatus`), and each change is also written to the action's status history as a row
    that keeps the status (`executed` → `executed`) with a detail starting `LEG_DETAIL`."""

    action = models.OneToOneField(Action, on_delete=models.CASCADE, related_name="bridge_leg")
    from_chain_id = models.PositiveBigIntegerField()
    to_chain_id = models.PositiveBigIntegerField()
    tool = models.CharField(max_length=64, help_text="The bridge LI.FI routed through")
    to_asset_id = models.CharField(max_length=200)
    to_symbol = models.CharField(max_length=20)
    # LI.FI's status and substatus, as it said them ("" until the source transaction is mined).
    status = models.CharField(max_length=16, blank=True, default="", db_index=True)
    substatus = models.CharField(max_length=64, blank=True, default="")
    substatus_message = models.TextField(blank=True, default="")
    receiving_tx_hash = models.CharField(max_length=66, blank=True, default="")
    receiving_chain_id = models.PositiveBigIntegerField(null=True, blank=True)
    # What arrived, as a decimal string in the received token's units, and which token.
    received_amount = models.CharField(max_length=80, blank=True, default="")
    received_symbol = models.CharField(max_length=20, blank=True, default="")
    received_asset_id = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(
        null=True, blank=True, help_text="When the source transaction was mined"
    )
    done_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="Past it, the console flags the bridge (still polled)"
    )
    # Polling bookkeeping: /status is asked again at next_check_at (backoff per check).
    checks = models.PositiveIntegerField(default=0)
    next_check_at = models.DateTimeField(null=True, blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["status", "next_check_at"], name="bridge_leg_due"),
            # The console's search by the destination leg's tx hash.
            models.Index(fields=["receiving_tx_hash"], name="bridge_leg_receiving_tx"),
        ]

    def __str__(self) -> str:
        return f"bridge leg of {self.action_id} ({self.status or 'not started'})"

    @property
    def finished(self) -> bool:
        return self.status in ("DONE", "FAILED")


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


class RampCurrency(models.TextChoices):
    BRL = "BRL", "Brazilian real"
    EUR = "EUR", "Euro"


class RampProvider(models.TextChoices):
    AVENIA = "avenia", "BRLA / Avenia"
    MONERIUM = "monerium", "Monerium"


# The provider that serves each fiat currency (SPEC: BRL at BRLA/Avenia, EUR at Monerium).
RAMP_PROVIDER_FOR = {RampCurrency.BRL: RampProvider.AVENIA, RampCurrency.EUR: RampProvider.MONERIUM}


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


class Card(models.Model):
    """A Picnic (Gnosis Pay) card; its account is a 1/1 Safe owned by the user's passkey account."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="cards"
    )
    card_id = models.CharField(max_length=100, unique=True, help_text="Gnosis Pay card id")
    last4 = models.CharField(max_length=4)
    safe_address = models.CharField(max_length=42)
    chain_id = models.PositiveBigIntegerField()
    # The Safe's Zodiac modifiers: Delay (scheduled transactions) and Roles (the spending
    # allowance, i.e. the daily limit), and the token the card spends.
    delay_address = models.CharField(max_length=42, blank=True)
    roles_address = models.CharField(max_length=42, blank=True)
    token = models.ForeignKey(
        Token, null=True, blank=True, on_delete=models.PROTECT, related_name="cards"
    )
    is_virtual = models.BooleanField(default=False)
    physical = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="virtual_cards"
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"card •••• {self.last4} of {self.user}"


class KycStatus(models.TextChoices):
    """Every provider's own KYC vocabulary, normalised (see actions/providers/ramps.py)."""

    NONE = "none", "None"
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"


class RampAccount(models.Model):
    """The user's account at a fiat on/off-ramp provider, one per currency. The KYC status is
    the provider's, refreshed on read; we keep its own word for it beside our normalised one."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ramp_accounts"
    )
    currency = models.CharField(max_length=3, choices=RampCurrency.choices)
    provider = models.CharField(max_length=16, choices=RampProvider.choices)
    external_id = models.CharField(
        max_length=100, help_text="Monerium profile id / Avenia subaccount id"
    )
    kyc_status = models.CharField(max_length=16, choices=KycStatus.choices, default=KycStatus.NONE)
    provider_status = models.CharField(
        max_length=100, blank=True, help_text="The provider's own status, as it said it"
    )
    kyc_checked_at = models.DateTimeField(null=True, blank=True)
    kyc_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        permissions = [
            ("refresh_kyc_rampaccount", "Can refresh the KYC status from the provider"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["user", "currency"], name="ramp_one_per_currency"),
            models.CheckConstraint(
                condition=Q(kyc_status__in=KycStatus.values), name="ramp_kyc_status_valid"
            ),
            models.CheckConstraint(
                condition=(
                    Q(currency="BRL", provider="avenia") | Q(currency="EUR", provider="monerium")
                ),
                name="ramp_provider_serves_currency",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.currency} ramp at {self.provider} for {self.user}"


class TokenTransfer(models.Model):
    """An ERC-20 Transfer log that touches one of our users' accounts, indexed from the chain."""

    chain_id = models.PositiveBigIntegerField()
    tx_hash = models.CharField(max_length=66)
    log_index = models.PositiveIntegerField()
    block_number = models.PositiveBigIntegerField()
    block_time = models.DateTimeField()
    token = models.ForeignKey(Token, on_delete=models.PROTECT, related_name="transfers")
    from_address = models.CharField(max_length=42, db_index=True)
    to_address = models.CharField(max_length=42, db_index=True)
    # uint256 as decimal digits: exact on every database (SQLite would round a DECIMAL this big)
    units = models.CharField(max_length=78)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chain_id", "tx_hash", "log_index"], name="token_transfer_unique"
            )
        ]
        indexes = [models.Index(fields=["chain_id", "tx_hash"], name="token_transfer_tx")]

    def __str__(self) -> str:
        return f"{self.units} {self.token.symbol} {self.from_address} → {self.to_address}"


class CardPurchase(models.Model):
    """A card transaction as Gnosis Pay's `GET /api/v1/cards/transactions` reports it."""

    card = models.ForeignKey(Card, on_delete=models.CASCADE, related_name="purchases")
    thread_id = models.CharField(max_length=100, unique=True, help_text="Gnosis Pay threadId")
    occurred_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)
    is_pending = models.BooleanField()
    kind = models.CharField(max_length=20, help_text="Payment, Refund or Reversal")
    status = models.CharField(max_length=40)
    mcc = models.CharField(max_length=4)
    merchant = models.JSONField()
    country = models.JSONField(null=True, blank=True)
    billing_amount = models.BigIntegerField(help_text="minor units of billing_currency")
    billing_currency = models.JSONField()
    transaction_amount = models.BigIntegerField(help_text="minor units, local currency")
    transaction_currency = models.JSONField()
    transaction_type = models.CharField(max_length=10, blank=True)
    tx_hashes = models.JSONField(default=list, blank=True)
    raw = models.JSONField()
    synced_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.kind} at {self.merchant.get('name', '?')} ({self.thread_id})"


class GnosisPaySession(models.Model):
    """The JWT of the last passkey SIWE sign-in to Gnosis Pay for a card's Safe. Kept (in the
    database, so every process sees it) only until it expires, to read card purchases; it is
    a credential: never shown in the admin or the API."""

    safe_address = models.CharField(max_length=42, unique=True, help_text="lowercase")
    token = models.TextField()
    expires_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"Gnosis Pay session for {self.safe_address} until {self.expires_at:%H:%M}"


class HistoryKind(models.TextChoices):
    TRANSFER = "transfer", "Transfer"
    SWAP = "swap", "Swap"
    RAMP = "ramp", "Ramp"
    INVESTMENT = "investment", "Investment"
    CARD_PURCHASE = "cardPurchase", "Card purchase"
    CARD_FREEZE = "cardFreeze", "Card frozen"
    CARD_UNFREEZE = "cardUnfreeze", "Card unfrozen"
    CARD_LIMIT = "cardLimitSet", "Card limit set"


class HistoryEntry(models.Model):
    """One line of get_transactions: an on-chain transaction of the user (its flows are the
    TokenTransfers with its hash), an executed action, or a card purchase, merged by tx hash.
    Rows are only ever added or enriched, and pages are keyset on (occurred_at, id), so a
    page boundary never moves when newer entries arrive."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="history_entries"
    )
    occurred_at = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=HistoryKind.choices)
    chain_id = models.PositiveBigIntegerField(null=True, blank=True)
    tx_hash = models.CharField(max_length=66, null=True, blank=True)
    action = models.OneToOneField(
        Action, null=True, blank=True, on_delete=models.SET_NULL, related_name="history_entry"
    )
    card_purchase = models.OneToOneField(
        CardPurchase,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="history_entry",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "chain_id", "tx_hash"],
                condition=Q(tx_hash__isnull=False),
                name="history_one_entry_per_tx",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=HistoryKind.values), name="history_kind_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["user", "-occurred_at", "-id"], name="history_page"),
        ]
        verbose_name_plural = "history entries"

    def __str__(self) -> str:
        return f"{self.kind} of {self.user} at {self.occurred_at:%Y-%m-%d %H:%M}"


class ActionStatusHistory(StatusHistory):
    action = models.ForeignKey(Action, on_delete=models.CASCADE, related_name="history")

    class Meta(StatusHistory.Meta):
        verbose_name_plural = "action status history"


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
        stuck_selector="actions.selectors.account_changes_stuck",
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


class SpendPeriod(models.TextChoices):
    DAILY = "daily", "day"
    WEEKLY = "weekly", "week"
    MONTHLY = "monthly", "month (30 days)"


# The contract counts a period in seconds from the permission's start.
PERIOD_SECONDS = {
    SpendPeriod.DAILY: 86400,
    SpendPeriod.WEEKLY: 604800,
    SpendPeriod.MONTHLY: 2592000,
}


class SpendPermissionStatus(models.TextChoices):
    REQUESTED = "requested", _("Requested")
    GRANTING = "granting", _("Being granted")
    ACTIVE = "active", _("Active")
    REVOKING = "revoking", _("Being revoked")
    REVOKED = "revoked", _("Revoked")
    EXPIRED = "expired", _("Expired")
    DECLINED = "declined", _("Declined")
    FAILED = "failed", _("Failed")


P = SpendPermissionStatus
# An agent asks (requested, with the grant action to sign) → the user signs the grant
# (granting) → its user operation is included (active) → the user revokes (revoking, the
# session key already destroyed) → the revocation is included (revoked). A grant never signed
# is declined; one that failed on chain, failed; an active one past its end, expired. Every
# end destroys the session key.
SPEND_PERMISSION_LIFECYCLE = register(
    Lifecycle(
        name="spendPermission",
        model_label="actions.SpendPermission",
        history_label="actions.SpendPermissionHistory",
        moves={
            P.REQUESTED: frozenset({P.GRANTING, P.DECLINED, P.FAILED}),
            P.GRANTING: frozenset({P.ACTIVE, P.FAILED}),
            P.ACTIVE: frozenset({P.REVOKING, P.EXPIRED}),
            P.REVOKING: frozenset({P.REVOKED, P.EXPIRED, P.FAILED}),
            P.REVOKED: frozenset(),
            P.EXPIRED: frozenset(),
            P.DECLINED: frozenset(),
            P.FAILED: frozenset(),
        },
        timestamps={P.ACTIVE: "granted_at"},
        history_fk="permission",
        timeline_url_name="actions-staff:spend-permission-timeline",
    )
)
SPEND_PERMISSION_LIVE = (P.REQUESTED, P.GRANTING, P.ACTIVE)


class SpendPermission(LifecycleModel):
    """What an agent may spend from the user's passkey account without a prompt, signed once
    by the user and enforced by the account's contract: a token, an allowance per period, the
    recipients (or any), a window. The server holds the grant's own session key, encrypted
    (actions/services/session_keys.py); it is emptied when the grant ends and never shown."""

    lifecycle = SPEND_PERMISSION_LIFECYCLE

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    status = models.CharField(
        max_length=16, choices=SpendPermissionStatus.choices, default=P.REQUESTED, db_index=True
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="spend_permissions"
    )
    account = models.ForeignKey(
        SmartAccount, on_delete=models.PROTECT, related_name="spend_permissions"
    )
    chain_id = models.PositiveBigIntegerField()
    token = models.ForeignKey(Token, on_delete=models.PROTECT, related_name="spend_permissions")
    # The agent (OAuth application) the permission is for: only its calls may spend under it.
    application = models.ForeignKey(
        settings.OAUTH2_PROVIDER_APPLICATION_MODEL,
        on_delete=models.PROTECT,
        related_name="spend_permissions",
    )
    name = models.CharField(max_length=100)
    purpose = models.TextField(blank=True, default="")
    allowance_units = models.CharField(max_length=78, help_text="per period, token units")
    allowance = models.CharField(max_length=80, help_text="per period, as a decimal string")
    period = models.CharField(max_length=8, choices=SpendPeriod.choices)
    # [{"address": "0x…", "name": "merchant.eth" or ""}]: names resolved when asked.
    recipients = models.JSONField(default=list, blank=True)
    any_recipient = models.BooleanField(default=False)
    # The pair, token → to_token, a permission may also swap (same chain; null: transfers
    # only), and the routers its swaps may go through (checksummed addresses).
    to_token = models.ForeignKey(
        Token,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="spend_permissions_into",
    )
    routers = models.JSONField(default=list, blank=True)
    starts_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)
    permission_id = models.CharField(max_length=66, unique=True, help_text="bytes32 on chain")
    session_key_address = models.CharField(max_length=42)
    # Fernet token of the session key; "" once the grant ended (destroyed).
    session_key_encrypted = models.TextField(blank=True, default="", editable=False)
    grant_action = models.OneToOneField(
        Action, null=True, blank=True, on_delete=models.SET_NULL, related_name="granted_permission"
    )
    revoke_action = models.ForeignKey(
        Action, null=True, blank=True, on_delete=models.SET_NULL, related_name="revoked_permissions"
    )
    error = models.TextField(blank=True, default="")
    granted_at = models.DateTimeField(null=True, blank=True)
    key_destroyed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            # The console's search by name, whatever its case (exact on LOWER(name)).
            models.Index(Lower("name"), name="spend_permission_name_lower"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=SpendPermissionStatus.values),
                name="spend_permission_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(period__in=SpendPeriod.values), name="spend_permission_period_valid"
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("starts_at")),
                name="spend_permission_window",
            ),
            # A grant that ended holds no key.
            models.CheckConstraint(
                condition=Q(status__in=[P.REQUESTED, P.GRANTING, P.ACTIVE])
                | Q(session_key_encrypted=""),
                name="spend_permission_ended_no_key",
            ),
        ]

    def __str__(self) -> str:
        return f"spending permission {self.name} ({self.status})"

    @property
    def has_key(self) -> bool:
        return bool(self.session_key_encrypted)


class SpendPermissionHistory(StatusHistory):
    permission = models.ForeignKey(
        SpendPermission, on_delete=models.CASCADE, related_name="history"
    )

    class Meta(StatusHistory.Meta):
        verbose_name_plural = "spending permission history"
