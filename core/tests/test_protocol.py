"""The lifecycle protocol: the registry of kinds of work, create(), terminal hooks, the
append-only guard, and the events and admin built from the registry."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionStatusHistory
from actions.tests.factories import make_action
from core import events, lifecycle
from core.admin import COUNT_CAP
from core.lifecycle import (
    Actor,
    Lifecycle,
    create,
    lifecycle_named,
    lifecycle_of,
    lifecycles,
    register,
)
from core.models import ActorKind, AppendOnlyError
from messaging.models import DELIVERY_LIFECYCLE, Delivery, DeliveryStatusHistory
from operations import billing
from operations.models import (
    OPERATION_LIFECYCLE,
    LedgerEntry,
    Operation,
    OperationStatusHistory,
    State,
)
from operations.services import operation_submit, operation_transition


@pytest.fixture
def operation(user, application):
    billing.wallet_grant(owner=user, amount=Decimal("100"))
    return operation_submit(
        owner=user, application=application, tool="t", category="c", input_text="hello"
    )


# --- the registry ------------------------------------------------------------------------------


def test_it_registers_the_three_kinds_of_work():
    assert {lc.name for lc in lifecycles()} == {
        "action",
        "delivery",
        "operation",
        "accountChange",
        "spendPermission",
    }
    assert lifecycle_named("action") is ACTION_LIFECYCLE
    assert lifecycle_of(Delivery) is DELIVERY_LIFECYCLE
    assert lifecycle_of(Operation) is OPERATION_LIFECYCLE


@pytest.mark.parametrize(
    ("lc", "model", "history"),
    [
        (ACTION_LIFECYCLE, Action, ActionStatusHistory),
        (DELIVERY_LIFECYCLE, Delivery, DeliveryStatusHistory),
        (OPERATION_LIFECYCLE, Operation, OperationStatusHistory),
    ],
)
def test_each_lifecycle_knows_its_model_and_history(lc, model, history):
    assert lc.model is model
    assert lc.history_model is history
    assert model.lifecycle is lc
    # The history's foreign key is the one the lifecycle names, pointing at the entity.
    assert history._meta.get_field(lc.history_fk).related_model is model
    assert set(lc.moves) == {value for value, _ in model._meta.get_field(lc.status_field).choices}


def test_it_says_where_each_entity_is_seen():
    pk = "00000000-0000-0000-0000-000000000001"
    assert ACTION_LIFECYCLE.resource_uri(pk) == f"picnic://action/{pk}"
    assert DELIVERY_LIFECYCLE.resource_uri(pk) is None  # not an MCP resource
    assert ACTION_LIFECYCLE.timeline_url(pk) == f"/staff/actions/{pk}/"
    assert DELIVERY_LIFECYCLE.timeline_url(pk) == f"/staff/deliveries/{pk}/"
    assert OPERATION_LIFECYCLE.timeline_url(pk) == f"/staff/operations/{pk}/"
    assert OPERATION_LIFECYCLE.admin_url() == "/admin/operations/operation/"
    assert DELIVERY_LIFECYCLE.admin_url(pk) == f"/admin/messaging/delivery/{pk}/change/"


def test_two_different_lifecycles_cannot_share_a_name(monkeypatch):
    monkeypatch.setattr(lifecycle, "_REGISTRY", dict(lifecycle._REGISTRY))
    assert register(ACTION_LIFECYCLE) is ACTION_LIFECYCLE  # declaring it again is harmless
    with pytest.raises(ImproperlyConfigured):
        register(replace(ACTION_LIFECYCLE, resource_uri_template=None))


def test_the_model_given_to_transition_must_be_the_lifecycles(user, application):
    action = make_action(user=user, application=application)
    with pytest.raises(ValueError, match="not the model of lifecycle 'delivery'"):
        lifecycle.transition(
            lifecycle=DELIVERY_LIFECYCLE,
            model=Action,
            pk=action.pk,
            to="sent",
            actor=Actor.system(),
        )


# --- create() ----------------------------------------------------------------------------------


def test_create_writes_the_row_and_its_first_history_row_at_one_instant(operation):
    row = operation.history.get()
    assert (row.from_status, row.status, row.actor_kind) == (None, State.QUEUED, ActorKind.AGENT)
    assert row.detail.startswith("admitted; ")
    assert operation.created_at == operation.updated_at == row.timestamp


def test_create_writes_neither_when_the_history_row_fails(user, application, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("history unavailable")

    monkeypatch.setattr(lifecycle, "record_history", broken)
    before = Action.objects.count()
    with pytest.raises(RuntimeError, match="history unavailable"):
        create(
            lifecycle=ACTION_LIFECYCLE,
            actor=Actor.agent(),
            detail="never",
            values={
                "user": user,
                "application": application,
                "type": "cardFreeze",
                "summary": "s",
                "chain_id": 31337,
                "smart_account": "0x" + "ab" * 20,
                "expires_at": timezone.now() + timedelta(minutes=5),
            },
        )
    assert Action.objects.count() == before


# --- terminal hooks ----------------------------------------------------------------------------


def test_a_terminal_state_sets_completed_at_and_when_details_expire(operation, settings):
    settings.OPERATIONS_DETAIL_TTL_HOURS = 3
    assert operation.completed_at is None and operation.detail_expires_at is None
    done = operation_transition(operation_id=operation.pk, to=State.CANCELLED, actor=Actor.system())
    row = done.history.latest("id")
    assert done.completed_at == row.timestamp
    assert done.detail_expires_at == done.completed_at + timedelta(hours=3)


def test_a_non_terminal_state_sets_neither(operation):
    moved = operation_transition(operation_id=operation.pk, to=State.RUNNING, actor=Actor.worker())
    assert moved.completed_at is None and moved.detail_expires_at is None


def test_an_explicit_value_wins_over_the_hooks(operation, settings):
    settings.OPERATIONS_DETAIL_TTL_HOURS = 1
    earlier = timezone.now() - timedelta(minutes=10)
    done = operation_transition(
        operation_id=operation.pk,
        to=State.FAILED,
        actor=Actor.worker(),
        updates={"completed_at": earlier},
    )
    assert done.completed_at == earlier
    assert done.detail_expires_at == earlier + timedelta(hours=1)


def test_is_terminal_reads_each_models_status_field(operation, user, application):
    assert operation.is_terminal is False
    done = operation_transition(operation_id=operation.pk, to=State.CANCELLED, actor=Actor.system())
    assert done.is_terminal is True
    action = make_action(user=user, application=application)
    assert action.is_terminal is False and action.resource_uri == f"picnic://action/{action.pk}"


# --- append-only -------------------------------------------------------------------------------


def test_history_refuses_updates_and_deletes_row_and_queryset(operation):
    row = operation.history.get()
    row.detail = "rewritten"
    with pytest.raises(AppendOnlyError, match="status history rows are append-only"):
        row.save()
    with pytest.raises(AppendOnlyError):
        row.delete()
    with pytest.raises(AppendOnlyError):
        OperationStatusHistory.objects.filter(pk=row.pk).update(detail="rewritten")
    with pytest.raises(AppendOnlyError):
        operation.history.all().delete()
    assert OperationStatusHistory.objects.get(pk=row.pk).detail.startswith("admitted; ")


def test_the_ledger_refuses_updates_and_deletes_row_and_queryset(operation):
    entry = LedgerEntry.objects.filter(operation=operation).get()
    entry.amount = Decimal("0")
    with pytest.raises(AppendOnlyError, match="ledger entries are append-only"):
        entry.save()
    with pytest.raises(AppendOnlyError):
        entry.delete()
    with pytest.raises(AppendOnlyError):
        LedgerEntry.objects.filter(pk=entry.pk).update(amount=0)
    with pytest.raises(AppendOnlyError):
        LedgerEntry.objects.filter(pk=entry.pk).delete()
    assert LedgerEntry.objects.get(pk=entry.pk).amount == operation.held_credits


def test_deleting_the_entity_still_removes_its_history(user, application):
    """Retention purges a finished action with its history (a cascade, not a row delete)."""
    action = make_action(user=user, application=application)
    Action.objects.filter(pk=action.pk).delete()
    assert not ActionStatusHistory.objects.filter(action_id=action.pk).exists()


def test_deleting_a_staff_user_keeps_the_rows_they_wrote(user, application, make_user):
    """The history's actor_user is SET_NULL: Django's collector, not the refused update()."""
    staff = make_user("temp-staff", is_staff=True)
    action = make_action(user=user, application=application)
    lifecycle.transition(
        lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=ActionStatus.REJECTED, actor=Actor.staff(staff)
    )
    staff.delete()
    row = action.history.get(status=ActionStatus.REJECTED)
    assert (row.actor_kind, row.actor_user) == (ActorKind.STAFF, None)


# --- events and admin from the registry --------------------------------------------------------


@pytest.fixture
def published(monkeypatch):
    seen = []
    monkeypatch.setattr(events, "publish", seen.append)
    return seen


def test_events_carry_the_registered_resource_uri(published):
    lifecycle.on_status_changed(
        sender=Action,
        pk="a1",
        from_status="proposed",
        to_status="rejected",
        lifecycle=ACTION_LIFECYCLE,
    )
    lifecycle.on_entity_changed(
        sender=Delivery, pk="d1", status="claimed", lifecycle=DELIVERY_LIFECYCLE
    )
    assert published == [
        {"lifecycle": "action", "id": "a1", "status": "rejected", "uri": "picnic://action/a1"},
        {"lifecycle": "delivery", "id": "d1", "status": "claimed"},
    ]


def test_events_follow_the_registry_not_the_name(published, monkeypatch):
    monkeypatch.setattr(lifecycle, "_REGISTRY", dict(lifecycle._REGISTRY))
    ticket = Lifecycle(
        name="ticket",
        model_label="actions.Action",
        history_label="actions.ActionStatusHistory",
        moves={"open": frozenset()},
        resource_uri_template="picnic://ticket/{id}",
    )
    register(ticket)
    lifecycle.on_status_changed(
        sender=Action, pk="t1", from_status="new", to_status="open", lifecycle=ticket
    )
    assert published == [
        {"lifecycle": "ticket", "id": "t1", "status": "open", "uri": "picnic://ticket/t1"}
    ]


def test_an_unregistered_lifecycle_is_published_without_a_uri(published, caplog):
    stray = replace(ACTION_LIFECYCLE, name="stray")
    lifecycle.on_entity_changed(sender=Action, pk="s1", status="proposed", lifecycle=stray)
    assert published == [{"lifecycle": "stray", "id": "s1", "status": "proposed"}]
    assert "not registered" in caplog.text


def test_the_admin_index_lists_the_tracked_work(client, staff_user, user, application):
    make_action(user=user, application=application)
    done = make_action(user=user, application=application)
    lifecycle.transition(
        lifecycle=ACTION_LIFECYCLE, pk=done.pk, to=ActionStatus.REJECTED, actor=Actor.system()
    )
    client.force_login(staff_user)
    response = client.get("/admin/")
    assert response.status_code == 200
    kinds = {row["name"]: row for row in response.context["kinds"]}
    assert set(kinds) == {"action", "delivery", "operation", "accountChange", "spendPermission"}
    assert kinds["action"]["unfinished"] == 1
    assert kinds["delivery"]["unfinished"] == 0
    for row in kinds.values():
        assert f'href="{row["url"]}"' in response.text


def test_the_admin_index_counts_open_work_without_sorting_it(client, staff_user, user, application):
    """Each kind's open rows are counted up to the cap with no ORDER BY (the model's ordering
    sorted every open row before the cap: 2 → 10 ms from 1M to 10M rows per app) and only the
    status read, which its index holds."""
    make_action(user=user, application=application)
    client.force_login(staff_user)
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/admin/").status_code == 200
    counts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(")]
    assert len(counts) == 5, counts
    for sql in counts:
        assert "ORDER BY" not in sql and f"LIMIT {COUNT_CAP + 1}" in sql, sql


def test_the_admin_shows_each_entitys_history_and_timeline(client, staff_user, operation):
    client.force_login(staff_user)
    response = client.get(OPERATION_LIFECYCLE.admin_url(operation.pk))
    assert response.status_code == 200
    assert OPERATION_LIFECYCLE.timeline_url(operation.pk) in response.text
    assert "admitted; " in response.text  # the history inline
