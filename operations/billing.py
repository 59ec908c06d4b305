"""Credits: a wallet per owner, an append-only ledger, and the operation's billing fields.

Amounts are Decimal with six places, never floats; every wallet change takes the wallet's row
lock and writes one ledger row with the balances after it.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Sum

from operations.errors import InsufficientCredits
from operations.models import BillingComponent, LedgerEntry, LedgerKind, Operation, Wallet

SIX = Decimal("0.000001")
ZERO = Decimal("0.000000")


def q(value) -> Decimal:
    return Decimal(value).quantize(SIX, rounding=ROUND_HALF_UP)


def fmt(value) -> str:
    """`1.25` → `"1.250000"`: exactly six decimals, as the seed's billing strings."""
    return f"{q(value):.6f}"


def price(kind: str) -> Decimal:
    """Credits per 1,000 tokens of each kind."""
    return Decimal(settings.OPERATIONS_PRICES[kind])


def usage_components(usage: dict[str, int]) -> dict[str, Decimal]:
    """Token usage → credits per component kind (text_pool, reasoning, generation)."""
    per_k = Decimal(1000)
    fresh_input = max(usage["input"] - usage["cached"], 0)
    text_pool = (fresh_input * price("input") + usage["cached"] * price("cached")) / per_k
    reasoning = usage["reasoning"] * price("reasoning") / per_k
    generation = max(usage["output"] - usage["reasoning"], 0) * price("output") / per_k
    return {"text_pool": q(text_pool), "reasoning": q(reasoning), "generation": q(generation)}


def estimate(*, input_text: str, max_output_tokens: int) -> Decimal:
    """A hold large enough for the prompt and the largest answer the tool may produce."""
    input_tokens = max(len(input_text) // 4, 1)
    return q(
        (input_tokens * price("input") + max_output_tokens * price("reasoning")) / Decimal(1000)
    )


def estimate_breakdown(*, input_text: str, max_output_tokens: int) -> dict[str, str | int]:
    """What `estimate` adds up, line by line, for a quote to show (each line rounded to six
    places; `total_credits` is the estimate itself)."""
    input_tokens = max(len(input_text) // 4, 1)
    per_k = Decimal(1000)
    return {
        "input_tokens": input_tokens,
        "input_credits": fmt(input_tokens * price("input") / per_k),
        "max_output_tokens": max_output_tokens,
        "output_credits": fmt(max_output_tokens * price("reasoning") / per_k),
        "total_credits": fmt(estimate(input_text=input_text, max_output_tokens=max_output_tokens)),
    }


def wallet_locked(owner) -> Wallet:
    """The owner's wallet (a user or their id), locked; made on first use."""
    owner_id = getattr(owner, "pk", owner)
    wallet = Wallet.objects.select_for_update().filter(owner_id=owner_id).first()
    if wallet is None:
        Wallet.objects.get_or_create(owner_id=owner_id)
        wallet = Wallet.objects.select_for_update().get(owner_id=owner_id)
    return wallet


def _move(
    wallet: Wallet,
    kind: str,
    amount: Decimal,
    *,
    available: Decimal,
    held: Decimal,
    operation: Operation | None,
    note: str = "",
) -> LedgerEntry:
    wallet.available_credits = q(wallet.available_credits + available)
    wallet.held_credits = q(wallet.held_credits + held)
    if wallet.available_credits < 0 or wallet.held_credits < 0:
        raise InsufficientCredits(f"wallet would go negative ({kind} {amount})")
    wallet.save(update_fields=["available_credits", "held_credits", "updated_at"])
    return LedgerEntry.objects.create(
        wallet=wallet,
        kind=kind,
        amount=q(amount),
        available_delta=q(available),
        held_delta=q(held),
        available_after=wallet.available_credits,
        held_after=wallet.held_credits,
        operation=operation,
        note=note,
    )


@transaction.atomic
def wallet_grant(*, owner, amount, note: str = "") -> LedgerEntry:
    return _move(
        wallet_locked(owner),
        LedgerKind.GRANT,
        q(amount),
        available=q(amount),
        held=ZERO,
        operation=None,
        note=note,
    )


def hold(*, operation: Operation, amount: Decimal) -> None:
    wallet = wallet_locked(operation.owner_id)
    if wallet.available_credits < amount:
        raise InsufficientCredits(
            f"this operation needs a hold of {fmt(amount)} credits; "
            f"{fmt(wallet.available_credits)} are available"
        )
    _move(wallet, LedgerKind.HOLD, amount, available=-amount, held=amount, operation=operation)


def release_hold(*, operation: Operation) -> dict[str, Decimal]:
    """Return the whole outstanding hold to the wallet (failed, cancelled, rejected)."""
    amount = q(operation.pending_credits)
    if amount > 0:
        _move(
            wallet_locked(operation.owner_id),
            LedgerKind.RELEASE,
            amount,
            available=amount,
            held=-amount,
            operation=operation,
            note="hold released",
        )
    return {
        "pending_credits": ZERO,
        "released_credits": q(operation.released_credits + amount),
        "billing_status": "released"
        if operation.wallet_debited_credits == 0
        else operation.billing_status,
    }


def settle(*, operation: Operation, usage: dict[str, int], source_id: str, evidence_at) -> dict:
    """Debit the usage from the hold, never more: a charge never exceeds its hold (the quote
    the user agreed to). Usage past it is unfunded, recorded as a `write_off` ledger row and
    not taken from available credits. The unused hold is released. Returns the operation's
    billing updates."""
    components = usage_components(usage)
    total = q(sum(components.values(), ZERO))
    wallet = wallet_locked(operation.owner_id)
    pending = q(operation.pending_credits)
    from_hold = min(total, pending)
    unfunded = q(total - from_hold)
    released = q(pending - from_hold)
    if from_hold > 0:
        _move(
            wallet,
            LedgerKind.DEBIT,
            from_hold,
            available=ZERO,
            held=-from_hold,
            operation=operation,
            note="usage debited from the hold",
        )
    if unfunded > 0:
        _move(
            wallet,
            LedgerKind.WRITE_OFF,
            unfunded,
            available=ZERO,
            held=ZERO,
            operation=operation,
            note=f"usage past the hold of {fmt(operation.held_credits)} credits, not charged",
        )
    if released > 0:
        _move(
            wallet,
            LedgerKind.RELEASE,
            released,
            available=released,
            held=-released,
            operation=operation,
            note="unused hold released",
        )
    debited = q(from_hold)
    remaining = debited
    # One read of what this source already recorded, then one INSERT for the rest (the
    # caller holds the operation's row lock, so nobody settles it meanwhile).
    stored = dict(
        BillingComponent.objects.filter(operation=operation, source_id=source_id).values_list(
            "kind", "pk"
        )
    )
    new = []
    for kind, credits in components.items():
        if credits == 0:
            continue
        share = min(credits, remaining)
        remaining -= share
        values = {
            "tool": operation.tool,
            "model": operation.model,
            "channel": operation.channel,
            "credential_id": settings.OPERATIONS_BACKEND_CREDENTIAL_ID,
            "usage_credits": credits,
            "wallet_debited_credits": share,
            "evidence_at": evidence_at,
            "updated_at": evidence_at,
        }
        if kind in stored:
            BillingComponent.objects.filter(pk=stored[kind]).update(**values)
        else:
            new.append(
                BillingComponent(operation=operation, source_id=source_id, kind=kind, **values)
            )
    BillingComponent.objects.bulk_create(new)
    return {
        "billing_status": "settled",
        "usage_credits": total,
        "wallet_debited_credits": debited,
        "unfunded_credits": unfunded,
        "pending_credits": ZERO,
        "released_credits": q(operation.released_credits + released),
        "tokens": {
            "input": usage["input"],
            "output": usage["output"],
            "cached": usage["cached"],
            "cache_write": usage.get("cache_write", 0),
        },
    }


def invariants(operation: Operation) -> list[str]:
    """Every way the billing numbers could disagree; empty when they add up."""
    op = operation
    problems = []
    spent_from_hold = op.held_credits - op.pending_credits - op.released_credits
    if spent_from_hold < 0:
        problems.append("pending + released exceed the hold")
    if spent_from_hold > op.wallet_debited_credits:
        problems.append("part of the hold is neither pending, released nor debited")
    if op.wallet_debited_credits > op.held_credits:
        problems.append("charged more than the hold")
    if op.refunded_credits > op.wallet_debited_credits:
        problems.append("refunded more than was debited")
    if op.billing_status == "settled":
        if op.usage_credits != op.wallet_debited_credits + op.unfunded_credits:
            problems.append("usage != debited + unfunded")
        if op.pending_credits != 0:
            problems.append("settled with a pending hold")
    if (
        op.billing_status in ("pending", "reconciling", "released", "none")
        and op.wallet_debited_credits != 0
    ):
        problems.append(f"{op.billing_status} but credits were debited")
    if op.billing_status == "released" and (
        op.pending_credits != 0 or op.released_credits != op.held_credits
    ):
        problems.append("released but the hold is not fully released")
    components = op.components.aggregate(u=Sum("usage_credits"), d=Sum("wallet_debited_credits"))
    if op.components.exists() and (
        components["u"] != op.usage_credits or components["d"] != op.wallet_debited_credits
    ):
        problems.append("components do not add up to the totals")
    ledger = {
        row["kind"]: row["total"] for row in op.ledger.values("kind").annotate(total=Sum("amount"))
    }
    if q(ledger.get("hold", 0)) != op.held_credits:
        problems.append("ledger holds != held_credits")
    if q(ledger.get("debit", 0)) != op.wallet_debited_credits:
        problems.append("ledger debits != wallet_debited_credits")
    if q(ledger.get("release", 0)) != op.released_credits:
        problems.append("ledger releases != released_credits")
    if q(ledger.get("refund", 0)) != op.refunded_credits:
        problems.append("ledger refunds != refunded_credits")
    if q(ledger.get("write_off", 0)) != op.unfunded_credits:
        problems.append("ledger write-offs != unfunded_credits")
    return problems


def wallet_invariants(wallet: Wallet) -> list[str]:
    problems = []
    sums = {
        row["kind"]: row["total"]
        for row in wallet.ledger.values("kind").annotate(total=Sum("amount"))
    }
    get = lambda k: q(sums.get(k, 0))  # noqa: E731
    debit_from_available = q(
        wallet.ledger.filter(kind=LedgerKind.DEBIT, available_delta__lt=0).aggregate(
            t=Sum("amount")
        )["t"]
        or 0
    )
    expected_available = (
        get("grant") - get("hold") + get("release") - debit_from_available + get("refund")
    )
    if q(expected_available) != wallet.available_credits:
        problems.append("available credits do not match the ledger")
    pending = q(
        Operation.objects.filter(owner=wallet.owner).aggregate(t=Sum("pending_credits"))["t"] or 0
    )
    if pending != wallet.held_credits:
        problems.append("held credits != sum of the operations' pending holds")
    return problems
