"""One transition function for every lifecycle in the project.

A lifecycle declares its legal moves, terminal states and the timestamp field each state sets.
`transition()` is the only code that changes a status: it checks the move is legal, applies it
with a conditional UPDATE (… WHERE status = <the status we checked>), appends the history row
in the same transaction and publishes `status_changed` after commit. Two workers racing on the
same row therefore produce exactly one transition: the loser's UPDATE matches no row, it
re-reads, and the move is no longer legal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import models, transaction
from django.dispatch import Signal
from django.utils import timezone

from picnic.models import ActorKind

logger = logging.getLogger(__name__)

# Sent after commit: sender=model class, pk, from_status, to_status, lifecycle.
status_changed = Signal()
# Sent after commit when what a status tool or timeline shows changed without a transition
# (an error recorded, an attempt counted): sender=model class, pk, status, lifecycle.
entity_changed = Signal()


@dataclass(frozen=True)
class Actor:
    kind: str
    user: Any = None

    @classmethod
    def system(cls) -> Actor:
        return cls(ActorKind.SYSTEM)

    @classmethod
    def worker(cls) -> Actor:
        return cls(ActorKind.WORKER)

    @classmethod
    def staff(cls, user) -> Actor:
        return cls(ActorKind.STAFF, user)

    @classmethod
    def end_user(cls, user) -> Actor:
        return cls(ActorKind.USER, user)

    @classmethod
    def agent(cls) -> Actor:
        return cls(ActorKind.AGENT)


class IllegalTransition(Exception):
    def __init__(self, *, model: str, pk: Any, current: str, target: str):
        self.current = current
        self.target = target
        super().__init__(f"{model} {pk}: cannot move from {current!r} to {target!r}")


@dataclass(frozen=True)
class Lifecycle:
    name: str
    moves: Mapping[str, frozenset[str]]
    timestamps: Mapping[str, str] = field(default_factory=dict)
    history_fk: str = "entity"
    status_field: str = "status"

    @property
    def terminal(self) -> frozenset[str]:
        return frozenset(s for s, targets in self.moves.items() if not targets)

    def can(self, current: str, target: str) -> bool:
        return target in self.moves.get(current, frozenset())

    def is_terminal(self, status: str) -> bool:
        return status in self.terminal


def _history_model(model: type[models.Model], lifecycle: Lifecycle) -> type[models.Model]:
    return model._meta.get_field("history").related_model


def record_history(
    *,
    lifecycle: Lifecycle,
    instance: models.Model,
    from_status: str | None,
    status: str,
    actor: Actor,
    detail: str | None = None,
    payload: Any = None,
    timestamp=None,
) -> models.Model:
    history = _history_model(type(instance), lifecycle)
    return history.objects.create(
        **{lifecycle.history_fk: instance},
        from_status=from_status,
        status=status,
        timestamp=timestamp or timezone.now(),
        detail=detail,
        payload=payload,
        actor_kind=actor.kind,
        actor_user=actor.user,
    )


@transaction.atomic
def transition(
    *,
    lifecycle: Lifecycle,
    model: type[models.Model],
    pk: Any,
    to: str,
    actor: Actor,
    detail: str | None = None,
    payload: Any = None,
    updates: Mapping[str, Any] | None = None,
    only_from: frozenset[str] | set[str] | None = None,
) -> models.Model:
    """Move `model(pk)` to `to`; raise IllegalTransition if the move is not (or no longer) legal.

    `only_from` narrows the legal sources further (e.g. "expire only if still proposed").
    """
    status_field = lifecycle.status_field
    manager = model._default_manager
    for _attempt in range(3):
        current = manager.filter(pk=pk).values_list(status_field, flat=True).first()
        if current is None:
            raise model.DoesNotExist(f"{model.__name__} {pk} does not exist")
        if not lifecycle.can(current, to) or (only_from is not None and current not in only_from):
            raise IllegalTransition(model=model.__name__, pk=pk, current=current, target=to)
        now = timezone.now()
        values = {status_field: to, **(updates or {})}
        if to in lifecycle.timestamps:
            values[lifecycle.timestamps[to]] = now
        if any(f.name == "updated_at" for f in model._meta.concrete_fields):
            values["updated_at"] = now
        if manager.filter(pk=pk, **{status_field: current}).update(**values) == 1:
            break
        # Another writer changed the status between our read and our UPDATE: re-check.
    else:
        raise IllegalTransition(model=model.__name__, pk=pk, current="(contended)", target=to)

    instance = manager.get(pk=pk)
    record_history(
        lifecycle=lifecycle,
        instance=instance,
        from_status=current,
        status=to,
        actor=actor,
        detail=detail,
        payload=payload,
        timestamp=now,
    )
    transaction.on_commit(
        lambda: status_changed.send_robust(
            sender=model, pk=pk, from_status=current, to_status=to, lifecycle=lifecycle
        )
    )
    logger.info("%s %s: %s -> %s (%s)", model.__name__, pk, current, to, actor.kind)
    return instance


def touch(
    *, lifecycle: Lifecycle, model: type[models.Model], pk: Any, changes: Mapping[str, Any]
) -> bool:
    """Record a visible change that is not a transition (an error, an attempt count).

    Writes only when a value differs from what is stored, and then bumps `updated_at` (so
    timelines polling with `?u=` re-render) and publishes `entity_changed` after commit (so
    subscribers hear of it). Returns whether anything changed. The status is never touched
    here: that is `transition()`'s alone.
    """
    if lifecycle.status_field in changes:
        raise ValueError("touch() cannot change the status; use transition()")
    values = dict(changes)
    if any(f.name == "updated_at" for f in model._meta.concrete_fields):
        values["updated_at"] = timezone.now()
    # exclude(a=x, b=y) keeps the row unless every value is already as asked.
    rows = model._default_manager.filter(pk=pk).exclude(**changes)
    if not rows.update(**values):
        return False
    status = (
        model._default_manager.filter(pk=pk).values_list(lifecycle.status_field, flat=True).first()
    )
    transaction.on_commit(
        lambda: entity_changed.send_robust(sender=model, pk=pk, status=status, lifecycle=lifecycle)
    )
    return True
