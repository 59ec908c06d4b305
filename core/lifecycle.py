"""One lifecycle protocol for every kind of work the project tracks.

A lifecycle declares its model and history model, its legal moves, terminal states, the
timestamp field each state sets, what reaching a terminal state also sets (`on_terminal`), the
MCP resource URI and staff timeline of one entity. Declared lifecycles are registered
(`register()`): the registry is the one list of "the kinds of work this system tracks", read by
the event channel, the admin and the support console.

`create()` writes an entity with its first history row. `transition()` is the only code that
changes a status: it checks the move is legal, applies it with a conditional UPDATE (… WHERE
status = <the status we checked>), appends the history row in the same transaction and
publishes `status_changed` after commit. Two workers racing on the same row therefore produce
exactly one transition: the loser's UPDATE matches no row, it re-reads, and the move is no
longer legal. `transition_path()` makes several legal moves at once (the same rows, events and
counts in two statements). `touch()` records a visible change that is not a transition.
`enqueue_on_commit()` hands an entity to its Celery task once the writing transaction commits.
The statements themselves (the conditional UPDATE, the history INSERT, the CTE of both) are
built and run by `core.lifecycle_sql`.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction
from django.dispatch import Signal
from django.urls import reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from core import events, lifecycle_sql, metrics, tracing
from core.errors import DomainError
from core.models import ActorKind

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
        self.model = model
        self.pk = pk
        self.current = current
        self.target = target
        super().__init__(f"{model} {pk}: cannot move from {current!r} to {target!r}")

    def refused(self, message: str, *, code: str | None = None) -> TransitionRefused:
        """This refusal in the words a client reads (the API answers it as a 409)."""
        return TransitionRefused(self, message, code=code)


class TransitionRefused(IllegalTransition, DomainError):
    """An illegal move a service tells its client about: still an IllegalTransition (and
    the same text) for the code that catches one; `message` and `code` are the client's."""

    status = 409
    code = "conflict"

    def __init__(self, cause: IllegalTransition, message: str, *, code: str | None = None):
        super().__init__(model=cause.model, pk=cause.pk, current=cause.current, target=cause.target)
        self.message = message
        if code is not None:
            self.code = code


@dataclass(frozen=True)
class Step:
    """One move of `transition_path()`: its target status, what its history row says, and the
    values it writes besides the status."""

    to: str
    detail: str | None = None
    payload: Any = None
    updates: Mapping[str, Any] | None = None


# Given the values a terminal transition is about to write (explicit updates and timestamps
# included) and its instant, returns more values to write; a value already there wins.
TerminalHook = Callable[[Mapping[str, Any], datetime], Mapping[str, Any]]


@dataclass(frozen=True)
class Lifecycle:
    name: str
    model_label: str  # "app_label.Model": the entity
    history_label: str  # "app_label.Model": its StatusHistory, with a foreign key `history_fk`
    moves: Mapping[str, frozenset[str]]
    timestamps: Mapping[str, str] = field(default_factory=dict)
    on_terminal: tuple[TerminalHook, ...] = ()
    history_fk: str = "entity"
    status_field: str = "status"
    # The MCP resource of one entity ("picnic://action/{id}"), or None if it is not one; events
    # carry it so the MCP adapter notifies that resource's subscribers.
    resource_uri_template: str | None = None
    # The staff live timeline of one entity: a URL name taking the entity's pk.
    timeline_url_name: str | None = None
    # Dotted path of a selector returning the "stuck" items (what staff must look at).
    stuck_selector: str | None = None

    @property
    def terminal(self) -> frozenset[str]:
        return frozenset(s for s, targets in self.moves.items() if not targets)

    def can(self, current: str, target: str) -> bool:
        return target in self.moves.get(current, frozenset())

    def is_terminal(self, status: str) -> bool:
        return status in self.terminal

    @property
    def model(self) -> type[models.Model]:
        return apps.get_model(self.model_label)

    @property
    def history_model(self) -> type[models.Model]:
        return apps.get_model(self.history_label)

    def resource_uri(self, pk: Any) -> str | None:
        if self.resource_uri_template is None:
            return None
        return self.resource_uri_template.format(id=pk)

    def timeline_url(self, pk: Any) -> str | None:
        return reverse(self.timeline_url_name, args=[pk]) if self.timeline_url_name else None

    def admin_url(self, pk: Any | None = None) -> str:
        """The admin changelist, or the change page of one entity."""
        meta = self.model._meta
        if pk is None:
            return reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk])


_REGISTRY: dict[str, Lifecycle] = {}


def register(lifecycle: Lifecycle) -> Lifecycle:
    """Declare a kind of work (each app does, beside its model). Returns the lifecycle."""
    known = _REGISTRY.get(lifecycle.name)
    if known is not None and known != lifecycle:
        raise ImproperlyConfigured(f"two lifecycles are named {lifecycle.name!r}")
    _REGISTRY[lifecycle.name] = lifecycle
    return lifecycle


def lifecycles() -> tuple[Lifecycle, ...]:
    """Every registered lifecycle, in the order the apps declared them."""
    return tuple(_REGISTRY.values())


def lifecycle_named(name: str) -> Lifecycle:
    return _REGISTRY[name]


def lifecycle_of(model: type[models.Model]) -> Lifecycle:
    label = model._meta.label
    for lifecycle in _REGISTRY.values():
        if lifecycle.model_label == label:
            return lifecycle
    raise LookupError(f"no lifecycle is registered for {label}")


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
    return lifecycle.history_model._default_manager.create(
        **{lifecycle.history_fk: instance},
        from_status=from_status,
        status=status,
        timestamp=timestamp or timezone.now(),
        detail=detail,
        payload=payload,
        actor_kind=actor.kind,
        actor_user=actor.user,
        trace_id=tracing.current_trace_id(),
    )


@transaction.atomic
def create(
    *,
    lifecycle: Lifecycle,
    actor: Actor,
    values: Mapping[str, Any],
    detail: str | None = None,
    payload: Any = None,
) -> models.Model:
    """Write a new entity and its first history row (from nothing to its initial status) in one
    transaction. `created_at` and `updated_at` are one instant (`values` may give it), which the
    history row carries too. No event: nobody can have subscribed to an entity not yet made."""
    now = values.get("created_at") or timezone.now()
    instance = lifecycle.model._default_manager.create(
        **{"created_at": now, "updated_at": now, "trace_id": tracing.current_trace_id(), **values}
    )
    record_history(
        lifecycle=lifecycle,
        instance=instance,
        from_status=None,
        status=getattr(instance, lifecycle.status_field),
        actor=actor,
        detail=detail,
        payload=payload,
        timestamp=now,
    )
    metrics.count_transition(lifecycle.name, getattr(instance, lifecycle.status_field))
    return instance


def _model_of(lifecycle: Lifecycle, model: type[models.Model] | None) -> type[models.Model]:
    # `model` is accepted for callers written before lifecycles knew their model.
    if model is not None and model._meta.label != lifecycle.model_label:
        raise ValueError(f"{model._meta.label} is not the model of lifecycle {lifecycle.name!r}")
    return lifecycle.model


def _has_updated_at(model: type[models.Model]) -> bool:
    return any(f.name == "updated_at" for f in model._meta.concrete_fields)


def _sources(lifecycle: Lifecycle, to: str, only_from) -> list[str]:
    """The states `to` may be reached from (narrowed by `only_from`), in declaration order."""
    return [
        state
        for state, targets in lifecycle.moves.items()
        if to in targets and (only_from is None or state in only_from)
    ]


def transition(
    *,
    lifecycle: Lifecycle,
    pk: Any,
    to: str,
    actor: Actor,
    detail: str | None = None,
    payload: Any = None,
    updates: Mapping[str, Any] | None = None,
    only_from: frozenset[str] | set[str] | None = None,
    model: type[models.Model] | None = None,
    expected: str | None = None,
    fields: tuple[str, ...] | None = None,
    guard: lifecycle_sql.Guard | None = None,
) -> models.Model:
    """Move entity `pk` to `to`; raise IllegalTransition if the move is not (or no longer) legal.

    `only_from` narrows the legal sources further (e.g. "expire only if still proposed").
    The state's timestamp field and, on a terminal state, the lifecycle's `on_terminal` hooks
    fill in what `updates` does not give explicitly.

    Two statements when the source is known: the conditional UPDATE (which also returns the
    row) and the history INSERT. It is known when one legal state leads to `to`, or when the
    caller says which status it last read (`expected`, one of the legal sources). Otherwise,
    or when that guess no longer holds, the current status is read first, so the history row
    says which it was.

    `fields` narrows what the returned instance holds to those attributes (and the pk), the
    others deferred as `.only()` leaves them: a caller that reads one or two of them saves
    loading the whole row. `guard`: see `transition_path()`.

    Inside a caller's transaction no savepoint is taken (two round trips each): a move that is
    not legal has written nothing and is raised after the block, so the caller's transaction
    goes on; a database error dooms the caller's transaction, as the UPDATE and its history row
    must never be split.
    """
    return transition_path(
        lifecycle=lifecycle,
        pk=pk,
        steps=(Step(to, detail=detail, payload=payload, updates=updates),),
        actor=actor,
        only_from=only_from,
        model=model,
        expected=expected,
        fields=fields,
        guard=guard,
    )


def transition_path(
    *,
    lifecycle: Lifecycle,
    pk: Any,
    steps: Sequence[Step],
    actor: Actor,
    only_from: frozenset[str] | set[str] | None = None,
    model: type[models.Model] | None = None,
    expected: str | None = None,
    fields: tuple[str, ...] | None = None,
    guard: lifecycle_sql.Guard | None = None,
) -> models.Model:
    """`transition()` through several moves at once, all or none (e.g. a delivery claimed and
    `sending` in the transaction that precedes its request): each step must be legal from the
    one before it; `only_from` and `expected` apply to the first.

    The same rows, events, counts and log as the moves one after another, in fewer round
    trips: one conditional UPDATE writing the last status (every step's `updates` and state
    timestamp; a later step's value wins), one INSERT of a history row per step (one instant,
    ascending ids), and after commit one `status_changed` per step, the events published
    together (`core.events.batch`). One log line names the whole path.

    With a `guard` (PostgreSQL only, `lifecycle_sql.Guard`), the UPDATE also requires the
    guard's condition and loads its related rows onto the instance; when it matches nothing,
    IllegalTransition is raised at once, without reading why: the caller reads and decides.
    """
    if not steps:
        raise ValueError("transition_path() needs at least one step")
    for before, after in zip(steps, steps[1:], strict=False):
        if not lifecycle.can(before.to, after.to):
            raise ValueError(f"{lifecycle.name}: no move from {before.to!r} to {after.to!r}")
    model = _model_of(lifecycle, model)
    using = model._default_manager.db
    fk = _history_fk_attname(lifecycle)

    def history(current: str, now, instance_pk) -> list[dict[str, Any]]:
        common = {
            fk: instance_pk,
            "timestamp": now,
            "actor_kind": actor.kind,
            "actor_user_id": actor.user.pk if actor.user is not None else None,
            "trace_id": tracing.current_trace_id(),
        }
        sources = [current, *(step.to for step in steps[:-1])]
        return [
            {
                **common,
                "from_status": source,
                "status": step.to,
                "detail": step.detail,
                "payload": step.payload,
            }
            for source, step in zip(sources, steps, strict=True)
        ]

    def moves(current: str) -> list[tuple[str, str]]:
        return list(zip([current, *(s.to for s in steps[:-1])], [s.to for s in steps], strict=True))

    if lifecycle_sql.one_statement(using):
        # The UPDATE and the history rows in one statement (atomic by itself): outside a
        # caller's transaction no BEGIN/COMMIT, and the events leave right after it.
        instance, current, now, illegal = _apply(
            lifecycle, model, pk, steps, only_from, expected, fields, history, guard
        )
        if instance is not None:
            done = moves(current)
            transaction.on_commit(lambda: _announce(lifecycle, model, pk, done), using=using)
    elif guard is not None:
        raise ValueError("a guarded transition needs PostgreSQL's UPDATE … FROM")
    else:
        with transaction.atomic(using=using, savepoint=False):
            instance, current, now, illegal = _apply(
                lifecycle, model, pk, steps, only_from, expected, fields
            )
            if instance is not None:
                lifecycle_sql.append_history(
                    lifecycle.history_model, using, history(current, now, instance.pk)
                )
                done = moves(current)
                transaction.on_commit(lambda: _announce(lifecycle, model, pk, done))
    if illegal is not None:
        raise illegal
    logger.info(
        "%s %s: %s (%s)",
        model.__name__,
        pk,
        " -> ".join([str(current), *(str(step.to) for step in steps)]),
        actor.kind,
    )
    return instance


def _announce(lifecycle: Lifecycle, model, pk, moves: list[tuple[str, str]]) -> None:
    """After commit: count each move and send its `status_changed`; the events the receivers
    publish leave together (one Redis round trip, not one per move)."""
    for _source, target in moves:
        metrics.TRANSITIONS.labels(lifecycle.name, target).inc()
    with events.batch():
        for source, target in moves:
            status_changed.send_robust(
                sender=model, pk=pk, from_status=source, to_status=target, lifecycle=lifecycle
            )


def _history_fk_attname(lifecycle: Lifecycle) -> str:
    return lifecycle.history_model._meta.get_field(lifecycle.history_fk).attname


def _apply(
    lifecycle, model, pk, steps, only_from, expected, fields, history=None, guard=None
) -> tuple:
    """The legality check and the conditional UPDATE of `transition_path()`: (instance, the
    status it moved from, the instant, None) or (None, …, the exception to raise)."""
    status_field = lifecycle.status_field
    manager = model._default_manager
    first, to = steps[0].to, steps[-1].to
    sources = _sources(lifecycle, first, only_from)
    guess = expected if expected in sources else (sources[0] if len(sources) == 1 else None)
    now = None
    for _attempt in range(3):
        if guess is not None:
            current, guess = guess, None
        else:
            current = manager.filter(pk=pk).values_list(status_field, flat=True).first()
            if current is None:
                return None, None, now, model.DoesNotExist(f"{model.__name__} {pk} does not exist")
        if current not in sources:
            illegal = IllegalTransition(model=model.__name__, pk=pk, current=current, target=first)
            return None, current, now, illegal
        now = timezone.now()
        values = {status_field: to}
        for step in steps:
            values.update(step.updates or {})
        for step in steps:
            if step.to in lifecycle.timestamps:
                values.setdefault(lifecycle.timestamps[step.to], now)
        if lifecycle.is_terminal(to):
            for hook in lifecycle.on_terminal:
                for name, value in hook(values, now).items():
                    values.setdefault(name, value)
        if _has_updated_at(model):
            values["updated_at"] = now
        rows = None
        if history is not None:
            rows = (lifecycle.history_model, lifecycle.history_fk, history(current, now, pk))
        instance = lifecycle_sql.update_returning(
            model, pk, status_field, current, values, rows, fields, guard
        )
        if instance is not None:
            return instance, current, now, None
        if guard is not None:  # the status, the guard or both: the caller reads what it needs
            illegal = IllegalTransition(
                model=model.__name__, pk=pk, current="(guarded)", target=first
            )
            return None, current, now, illegal
        # Not (or no longer) `current`: another writer moved it, or the guess was wrong.
        # The next attempt reads the status and re-checks.
    illegal = IllegalTransition(model=model.__name__, pk=pk, current="(contended)", target=first)
    return None, current, now, illegal


def touch(
    *,
    lifecycle: Lifecycle,
    pk: Any,
    changes: Mapping[str, Any],
    model: type[models.Model] | None = None,
) -> bool:
    """Record a visible change that is not a transition (an error, an attempt count).

    Writes only when a value differs from what is stored, and then bumps `updated_at` (so
    timelines polling with `?u=` re-render) and publishes `entity_changed` after commit (so
    subscribers hear of it). Returns whether anything changed. The status is never touched
    here: that is `transition()`'s alone.
    """
    model = _model_of(lifecycle, model)
    if lifecycle.status_field in changes:
        raise ValueError("touch() cannot change the status; use transition()")
    values = dict(changes)
    if _has_updated_at(model):
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


def enqueue_on_commit(task: str, pk: Any) -> None:
    """Hand entity `pk` to the Celery task at dotted path `task` once the current transaction
    commits (at once outside one). Imported late: tasks modules import the services that call
    this. Robust: a broker that refuses never undoes committed work; beat catches it up."""
    transaction.on_commit(lambda: _publish(task, str(pk)), robust=True)


def _publish(task: str, pk: str) -> None:
    # The Celery instrumentation makes its publish span current before the send and restores
    # the caller's context after it; a send that raises (the broker down) never comes back to
    # restore it, and all later work in this thread would be traced in that span. Sent in a
    # copy of the context, the span goes with the copy.
    contextvars.copy_context().run(import_string(task).delay, pk)


# --- The event channel: every transition and visible change is published ------------------


def _publish_entity(lifecycle, pk, status) -> None:
    event = {"lifecycle": lifecycle.name, "id": str(pk), "status": str(status)}
    # The registered lifecycle says whether one entity is an MCP resource, and its URI.
    try:
        uri = lifecycle_named(lifecycle.name).resource_uri(pk)
    except KeyError:
        logger.error("lifecycle %r is not registered: its events carry no uri", lifecycle.name)
        uri = None
    if uri:
        event["uri"] = uri
    events.publish(event)


def on_status_changed(sender, pk, from_status, to_status, lifecycle, **kwargs) -> None:
    """Receiver of `core.lifecycle.status_changed`: every transition goes on the channel."""
    _publish_entity(lifecycle, pk, to_status)


def on_entity_changed(sender, pk, status, lifecycle, **kwargs) -> None:
    """Receiver of `core.lifecycle.entity_changed`: a visible change without a transition
    (an error recorded) is an event too, with the status it still has."""
    _publish_entity(lifecycle, pk, status)
