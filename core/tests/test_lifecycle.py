"""The shared transition function, exercised through the action lifecycle."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.contrib.auth.models import User
from django.db import close_old_connections, connection, transaction

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionStatusHistory
from actions.tests.factories import make_action
from core.lifecycle import (
    Actor,
    IllegalTransition,
    Step,
    status_changed,
    transition,
    transition_path,
)
from core.lifecycle_sql import Guard
from core.models import ActorKind, AppendOnlyError

S = ActionStatus


@pytest.fixture
def action(user, application):
    return make_action(user=user, application=application)


def test_it_records_the_initial_proposed_row(action):
    rows = list(action.history.values_list("from_status", "status", "actor_kind"))
    assert rows == [(None, "proposed", ActorKind.AGENT)]


def test_it_sets_the_timestamp_of_each_state_and_appends_history(action):
    transition(
        lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.end_user(action.user)
    )
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SUBMITTED, actor=Actor.worker())
    transition(
        lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.BROADCAST, actor=Actor.worker(), detail="ok"
    )
    action.refresh_from_db()
    assert action.status == S.BROADCAST
    assert action.signed_at is not None and action.broadcast_at is not None
    assert action.executed_at is None
    assert action.signed_at <= action.broadcast_at
    history = list(action.history.order_by("timestamp", "id"))
    assert [(h.from_status, h.status) for h in history] == [
        (None, "proposed"),
        ("proposed", "signed"),
        ("signed", "submitted"),
        ("submitted", "broadcast"),
    ]
    assert history[1].actor_user == action.user
    assert history[3].detail == "ok"
    assert history[3].timestamp == action.broadcast_at


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], S.EXECUTED),
        ([], S.BROADCAST),
        ([S.SIGNED], S.EXPIRED),
        ([S.SIGNED], S.REJECTED),
        ([S.REJECTED], S.SIGNED),
        ([S.EXPIRED], S.SIGNED),
        ([S.SIGNED, S.SUBMITTED, S.BROADCAST, S.EXECUTED], S.FAILED),
        ([S.SIGNED, S.SUBMITTED, S.FAILED], S.EXECUTED),
    ],
)
def test_it_refuses_moves_outside_the_seed_lifecycle(action, path, illegal):
    for step in path:
        updates = {"tx_hash": "0x" + "ab" * 32, "block_number": 1} if step == S.EXECUTED else None
        transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system(), updates=updates
        )
    rows_before = action.history.count()
    with pytest.raises(IllegalTransition):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=illegal, actor=Actor.system())
    action.refresh_from_db()
    assert action.status == (path[-1] if path else S.PROPOSED)
    assert action.history.count() == rows_before


def test_terminal_states_are_the_seeds():
    assert ACTION_LIFECYCLE.terminal == {S.EXECUTED, S.FAILED, S.EXPIRED, S.REJECTED}


def test_the_database_refuses_an_executed_action_without_tx_hash(action):
    from django.db import IntegrityError

    with pytest.raises(IntegrityError), transaction.atomic():
        Action.objects.filter(pk=action.pk).update(status=S.EXECUTED)


def test_history_rows_are_append_only(action):
    row = action.history.get()
    row.detail = "rewritten"
    with pytest.raises(AppendOnlyError):
        row.save()
    with pytest.raises(AppendOnlyError):
        row.delete()
    assert ActionStatusHistory.objects.get(pk=row.pk).detail == "proposed by the action tool"


def test_it_publishes_status_changed_only_after_commit(action, django_capture_on_commit_callbacks):
    seen = []

    def receiver(sender, pk, from_status, to_status, **kwargs):
        seen.append((sender, pk, from_status, to_status))

    status_changed.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            transition(
                lifecycle=ACTION_LIFECYCLE,
                pk=action.pk,
                to=S.REJECTED,
                actor=Actor.end_user(action.user),
            )
            assert seen == []
    finally:
        status_changed.disconnect(receiver)
    assert seen == [(Action, action.pk, "proposed", "rejected")]


def test_a_failing_subscriber_does_not_break_the_transition(
    action, django_capture_on_commit_callbacks
):
    def broken(**kwargs):
        raise RuntimeError("subscriber down")

    status_changed.connect(broken)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            transition(
                lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.REJECTED, actor=Actor.system()
            )
    finally:
        status_changed.disconnect(broken)
    action.refresh_from_db()
    assert action.status == S.REJECTED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_writers_give_exactly_one_transition(user, application):
    """Real concurrent PostgreSQL connections: both read `broadcast`, both try to execute."""
    action = make_action(user=user, application=application)
    for step in (S.SIGNED, S.SUBMITTED, S.BROADCAST):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    barrier = threading.Barrier(2)
    results: list[str] = []

    def worker(n: int) -> None:
        try:
            with transaction.atomic():
                # Both transactions have read the row before either writes.
                assert Action.objects.get(pk=action.pk).status == S.BROADCAST
                barrier.wait(timeout=10)
                transition(
                    lifecycle=ACTION_LIFECYCLE,
                    pk=action.pk,
                    to=S.EXECUTED,
                    actor=Actor.worker(),
                    detail=f"worker {n}",
                    updates={"tx_hash": "0x" + f"{n:02x}" * 32, "block_number": n},
                )
            results.append("moved")
        except IllegalTransition:
            results.append("refused")
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(results) == ["moved", "refused"]
    action.refresh_from_db()
    assert action.status == S.EXECUTED
    executed_rows = action.history.filter(status=S.EXECUTED)
    assert executed_rows.count() == 1
    # The row that won is the one whose receipt fields landed.
    assert executed_rows.get().detail == f"worker {action.block_number}"


@pytest.mark.postgres  # one statement a move there (the CTE); more on SQLite
def test_a_move_from_its_one_legal_source_is_one_statement(action, django_assert_num_queries):
    # The conditional UPDATE returns the row (no read before or after it) and inserts the
    # history row in the same statement (a data-modifying CTE); no savepoint is taken.
    with django_assert_num_queries(1) as captured:
        moved = transition(
            lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.system()
        )
    sql = [q["sql"].split()[0] for q in captured.captured_queries]
    assert sql == ["WITH"]
    assert "UPDATE" in captured[0]["sql"] and "INSERT INTO" in captured[0]["sql"]
    assert moved.status == S.SIGNED and moved.signed_at is not None
    assert moved.summary == action.summary and moved.user_op == action.user_op
    assert list(action.history.values_list("from_status", "status"))[-1] == ("proposed", "signed")


@pytest.mark.postgres  # psycopg binds on the server and prepares; SQLite quotes as ever
def test_a_move_is_bound_on_the_server_and_prepared_after_a_few_runs(user, application):
    # The values travel apart from the text (quotes, JSON and NULLs arrive as they were), and
    # from the sixth run on this connection PostgreSQL runs the prepared statement.
    actions = [make_action(user=user, application=application) for _ in range(7)]
    detail = 'it\'s "quoted" -- $1 %s; DROP TABLE x'
    for moved in actions:
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=moved.pk,
            to=S.SIGNED,
            actor=Actor.end_user(user),
            detail=detail,
            payload={"quote": "'", "none": None},
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            ['WITH u AS (UPDATE "actions_action" SET %'],
        )
        prepared = [row[0] for row in cursor.fetchall()]
    assert len(prepared) == 1 and "$1" in prepared[0]
    for moved in actions:
        last = moved.history.order_by("id").last()
        assert (last.from_status, last.status, last.detail) == ("proposed", "signed", detail)
        assert last.payload == {"quote": "'", "none": None} and last.actor_user == user
    assert set(Action.objects.filter(pk__in=[a.pk for a in actions]).values_list("status")) == {
        (S.SIGNED,)
    }


@pytest.mark.postgres
def test_a_threshold_of_zero_binds_on_the_server_and_never_prepares(user, application, settings):
    # Behind a transaction-mode pooler a prepared statement may be on another connection.
    settings.DATABASE_PREPARE_THRESHOLD = 0
    for _ in range(7):
        moved = make_action(user=user, application=application)
        transition(lifecycle=ACTION_LIFECYCLE, pk=moved.pk, to=S.SIGNED, actor=Actor.system())
        assert Action.objects.get(pk=moved.pk).status == S.SIGNED
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements")
        assert cursor.fetchone() == (0,)


def test_a_move_asked_for_some_fields_returns_those_and_defers_the_rest(
    action, django_assert_num_queries
):
    moved = transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=S.SIGNED,
        actor=Actor.system(),
        fields=("status",),
    )
    assert moved.pk == action.pk and moved.status == S.SIGNED
    assert {"summary", "signed_at", "user_op"} <= moved.get_deferred_fields()
    assert "status" not in moved.get_deferred_fields()
    # A deferred field still reads the stored value (one query), as after `.only()`.
    with django_assert_num_queries(1):
        assert moved.signed_at is not None
    assert list(action.history.values_list("from_status", "status"))[-1] == ("proposed", "signed")


def _active_user_guard(*params) -> Guard:
    quote = connection.ops.quote_name
    user = quote(User._meta.db_table)
    return Guard(
        f"{user}.{quote('is_active')} AND {user}.{quote('username')} = %s",
        params,
        related=("user",),
    )


def _sign_if_active(action, username: str, **kwargs):
    """Sign `action` on the condition that its user is active and named `username`."""
    return transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=S.SIGNED,
        actor=Actor.system(),
        guard=_active_user_guard(username),
        **kwargs,
    )


@pytest.mark.postgres  # UPDATE … FROM
def test_a_guarded_move_loads_its_related_rows_in_the_same_statement(
    action, django_assert_num_queries
):
    with django_assert_num_queries(1) as captured:
        moved = _sign_if_active(action, action.user.username, fields=("status", "user"))
        # The user came with the move, as select_related leaves it: no query for it.
        assert (moved.user.pk, moved.user.username) == (action.user_id, action.user.username)
    assert captured.captured_queries[0]["sql"].startswith("WITH")
    assert moved.status == S.SIGNED and "summary" in moved.get_deferred_fields()
    history = list(action.history.order_by("id").values_list("from_status", "status"))
    assert history == [(None, "proposed"), ("proposed", "signed")]


@pytest.mark.postgres
def test_a_guarded_move_whose_guard_fails_writes_nothing_and_reads_nothing_more(
    action, django_assert_num_queries
):
    User.objects.filter(pk=action.user_id).update(is_active=False)
    with django_assert_num_queries(1), pytest.raises(IllegalTransition):
        _sign_if_active(action, action.user.username)
    # The same guard over the wrong name fails as well; the right one then moves it.
    User.objects.filter(pk=action.user_id).update(is_active=True)
    with pytest.raises(IllegalTransition):
        _sign_if_active(action, "someone else")
    action.refresh_from_db()
    assert action.status == S.PROPOSED and action.history.count() == 1
    _sign_if_active(action, action.user.username)
    action.refresh_from_db()
    assert action.status == S.SIGNED and action.history.count() == 2


def test_a_guard_without_update_from_is_refused(action):
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL runs guarded moves")
    with pytest.raises(ValueError, match="PostgreSQL"):
        _sign_if_active(action, action.user.username)
    action.refresh_from_db()
    assert action.status == S.PROPOSED and action.history.count() == 1


@pytest.mark.postgres  # one statement a move there (the CTE); more on SQLite
def test_a_move_with_several_legal_sources_reads_the_status_first(
    action, django_assert_num_queries
):
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.system())
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SUBMITTED, actor=Actor.system())
    # failed is reachable from signed, submitted and broadcast: the history names which.
    with django_assert_num_queries(2) as captured:
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.FAILED, actor=Actor.system())
    sql = [q["sql"].split()[0] for q in captured.captured_queries]
    assert sql == ["SELECT", "WITH"]
    assert list(action.history.values_list("from_status", "status"))[-1] == (
        "submitted",
        "failed",
    )


def test_a_lost_race_on_the_one_source_says_what_the_status_is_now(action):
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.REJECTED, actor=Actor.system())
    with pytest.raises(IllegalTransition) as raised:
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=S.SIGNED,
            actor=Actor.system(),
            only_from={S.PROPOSED},
        )
    assert raised.value.current == S.REJECTED
    with pytest.raises(Action.DoesNotExist):
        transition(lifecycle=ACTION_LIFECYCLE, pk=uuid.uuid4(), to=S.SIGNED, actor=Actor.system())


@pytest.mark.postgres  # one statement a move there (the CTE); more on SQLite
def test_a_path_is_one_statement_with_a_history_row_per_step(
    action, django_assert_num_queries, django_capture_on_commit_callbacks, caplog
):
    seen = []

    def receiver(sender, pk, from_status, to_status, **kwargs):
        seen.append((from_status, to_status))

    status_changed.connect(receiver)
    try:
        with (
            django_capture_on_commit_callbacks(execute=True),
            django_assert_num_queries(1) as captured,
            caplog.at_level("INFO", logger="core.lifecycle"),
        ):
            moved = transition_path(
                lifecycle=ACTION_LIFECYCLE,
                pk=action.pk,
                steps=(
                    Step(S.SIGNED, detail="signed it", payload={"n": 1}),
                    Step(S.SUBMITTED, detail="submitted it", updates={"error": "x"}),
                ),
                actor=Actor.end_user(action.user),
            )
    finally:
        status_changed.disconnect(receiver)
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["WITH"]
    # Every step's state timestamp and updates; the events and counts one per step, in order.
    assert moved.status == S.SUBMITTED and moved.error == "x"
    assert moved.signed_at is not None and moved.signed_at == moved.updated_at
    assert seen == [("proposed", "signed"), ("signed", "submitted")]
    rows = list(action.history.order_by("timestamp", "id"))[1:]
    assert [(r.from_status, r.status, r.detail, r.payload) for r in rows] == [
        ("proposed", "signed", "signed it", {"n": 1}),
        ("signed", "submitted", "submitted it", None),
    ]
    assert {r.timestamp for r in rows} == {moved.signed_at}
    assert {r.actor_user_id for r in rows} == {action.user.pk}
    assert [r.getMessage() for r in caplog.records if r.name == "core.lifecycle"] == [
        f"Action {action.pk}: proposed -> signed -> submitted (user)"
    ]


def test_a_path_whose_first_move_is_not_legal_writes_nothing(action):
    transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.REJECTED, actor=Actor.system())
    with pytest.raises(IllegalTransition):
        transition_path(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            steps=(Step(S.SIGNED), Step(S.SUBMITTED)),
            actor=Actor.system(),
        )
    action.refresh_from_db()
    assert action.status == S.REJECTED
    assert action.history.count() == 2


def test_a_path_through_an_impossible_move_is_refused_before_anything_is_read(
    action, django_assert_num_queries
):
    with django_assert_num_queries(0), pytest.raises(ValueError, match="no move"):
        transition_path(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            steps=(Step(S.SIGNED), Step(S.EXECUTED)),
            actor=Actor.system(),
        )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_move_and_its_history_row_are_one_atomic_statement(
    user, application, django_assert_num_queries
):
    """In autocommit (a worker's transition) the move is one statement and nothing else: no
    transaction block is opened around it, and if its history row cannot be written the
    status is not moved either."""
    from django.db import DataError

    action = make_action(user=user, application=application)
    with django_assert_num_queries(1):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SIGNED, actor=Actor.system())
    assert not connection.in_atomic_block
    assert connection.get_autocommit()
    # actor_kind is varchar(16): the history INSERT fails, and the UPDATE with it.
    with pytest.raises(DataError):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=S.SUBMITTED, actor=Actor("x" * 40))
    action.refresh_from_db()
    assert action.status == S.SIGNED
    assert list(action.history.values_list("status", flat=True)) == ["proposed", "signed"]
