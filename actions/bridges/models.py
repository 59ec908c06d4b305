"""The destination leg of a cross-chain swap."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from actions.execution.models import Action


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
