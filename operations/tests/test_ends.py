"""Every operation reaches a true end: lost races are no-ops that never stop a batch, every
terminal operation has its details purged in time, a decided review is null, and visible
changes without a transition are events."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import close_old_connections, connection
from django.utils import timezone

from chain.stack import free_port
from dev.testing import history_statuses
from operations import services
from operations.backends.openai import BackendResponse, NotSent, OutcomeUnknown, Refused
from operations.decisions import (
    operation_pause,
    operation_resume,
    operation_review_decide,
)
from operations.models import Operation, State
from operations.serializers import operation_status_payload
from operations.services import (
    operation_check,
    operation_dispatch,
    operation_reconcile,
    operation_submit,
    operations_expire_details,
    operations_process_due,
)

from .conftest import local_backend


@pytest.fixture
def queued_backend(settings):
    """A backend whose work stays `queued` for the whole test: every acknowledgement is
    `queued`, whatever the machine's speed."""
    with local_backend(settings, work_seconds=3600, timeout=5.0) as server:
        yield server


def submit(owner, text="Write a haiku", category="writing") -> Operation:
    return operation_submit(
        owner=owner, application=None, tool="text-gen", category=category, input_text=text
    )


def creates_for(server, op) -> int:
    return sum(1 for c in server.creates if c["key"] == str(op.pk))


class Interloper:
    """The batch worker's backend client: just before its create request for `target`
    leaves, someone else acts on that operation (`act`), as a concurrent worker would."""

    def __init__(self, client, *, target, act):
        self.client, self.target, self.act = client, str(target), act
        self.acted = None

    def create(self, **kwargs):
        if kwargs["idempotency_key"] == self.target and self.acted is None:
            self.acted = self.act()
        return self.client.create(**kwargs)

    def retrieve(self, response_id):
        return self.client.retrieve(response_id)


class Scripted:
    """A backend client answering from a script: each entry a BackendResponse, an exception
    to raise, or a callable returning one of those (to act while the request is out)."""

    def __init__(self, *, create=(), retrieve=()):
        self.creates, self.retrieves = list(create), list(retrieve)

    @staticmethod
    def _next(script):
        answer = script.pop(0)
        answer = answer() if callable(answer) else answer
        if isinstance(answer, Exception):
            raise answer
        return answer

    def create(self, **kwargs):
        return self._next(self.creates)

    def retrieve(self, response_id):
        return self._next(self.retrieves)


def answer(status: str, **raw) -> BackendResponse:
    return BackendResponse("resp_1", status, {"id": "resp_1", "status": status, **raw})


COMPLETED = answer(
    "completed",
    output=[{"content": [{"type": "output_text", "text": "a haiku"}]}],
    usage={"input_tokens": 10, "output_tokens": 5},
)


def three_with_one_approved(owner, staff_user) -> tuple[Operation, Operation, Operation]:
    """Three operations submitted in turn; the middle one was held for review and approved."""
    first, approved, last = (
        submit(owner),
        submit(owner, category="sensitive"),
        submit(owner),
    )
    operation_review_decide(
        operation_id=approved.pk, staff_user=staff_user, approve=True, note="ok"
    )
    return first, approved, last


# --- 1. a lost race is a no-op and the batch goes on -------------------------------------


def test_a_batch_goes_on_when_the_on_commit_dispatch_races_it_for_one_operation(
    queued_backend, funded, staff_user
):
    first, approved, last = three_with_one_approved(funded, staff_user)
    Operation.objects.filter(pk=last.pk).update(next_check_at=timezone.now())  # after `approved`
    # The on-commit task of the approval runs while the beat is dispatching the same operation.
    client = Interloper(
        services.backend(),
        target=approved.pk,
        act=lambda: operation_dispatch(operation_id=approved.pk),
    )
    outcomes = operations_process_due(client=client)
    assert client.acted == "not_due"  # the claim was the beat's: the task stood down
    assert outcomes == Counter({"waiting": 3})
    for op in (first, approved, last):
        op = Operation.objects.get(pk=op.pk)
        assert (op.state, op.dispatch_status) == ("waiting", "acknowledged")
        assert creates_for(queued_backend, op) == 1  # one request, not one per worker
    assert history_statuses(approved) == ["queued", "needs_review", "queued", "waiting"]


def test_a_batch_goes_on_when_staff_moved_one_of_its_operations_first(
    queued_backend, funded, staff_user
):
    first, paused, last = submit(funded), submit(funded), submit(funded)
    client = Interloper(
        services.backend(),
        target=paused.pk,
        act=lambda: operation_pause(operation_id=paused.pk, staff_user=staff_user),
    )
    outcomes = operations_process_due(client=client)
    assert outcomes == Counter({"waiting": 2, "raced": 1})
    assert Operation.objects.get(pk=last.pk).state == State.WAITING
    assert Operation.objects.get(pk=first.pk).state == State.WAITING
    op = Operation.objects.get(pk=paused.pk)
    assert (op.state, op.dispatch_status, op.backend_response_id) == ("paused", "pending", None)
    # The lost acknowledgement wrote nothing.
    assert history_statuses(paused) == ["queued", "paused"]
    # Resumed, it is dispatched again under the same key and gets the same backend response.
    operation_resume(operation_id=paused.pk, staff_user=staff_user)
    assert operation_dispatch(operation_id=paused.pk) == "waiting"
    assert len([k for k in queued_backend.by_key if k == str(paused.pk)]) == 1
    assert creates_for(queued_backend, paused) == 2


@pytest.mark.parametrize(
    "answer_after_the_move",
    [NotSent("could not connect"), BackendResponse("resp_1", "queued", {"status": "queued"})],
    ids=["backend-down", "stale-answer"],
)
def test_a_worker_that_lost_an_operation_writes_nothing(
    funded, staff_user, settings, answer_after_the_move
):
    """The check read it `waiting`; while its request was out, staff paused it. The worker's
    note (a backend problem, or when to look again) would land on an operation that is no
    longer its own: it stands down instead."""
    settings.OPERATIONS_POLL_SECONDS = 0.0
    op = submit(funded)
    client = Scripted(create=[answer("queued")])
    assert operation_dispatch(operation_id=op.pk, client=client) == "waiting"

    def staff_pause_then_answer():
        operation_pause(operation_id=op.pk, staff_user=staff_user)
        before.update(Operation.objects.filter(pk=op.pk).values()[0])
        return answer_after_the_move

    before: dict = {}
    client.retrieves.append(staff_pause_then_answer)
    assert operation_check(operation_id=op.pk, client=client) == "raced"
    after = Operation.objects.filter(pk=op.pk).values()[0]
    assert after == before and after["state"] == "paused" and after["last_error"] == ""


def run_together(**work) -> dict[str, object]:
    """Run each callable in its own thread (its own database connection), released at once;
    what each returned, or the exception it raised."""
    barrier = threading.Barrier(len(work))
    results: dict[str, object] = {}

    def run(name, call):
        try:
            barrier.wait(timeout=10)
            results[name] = call()
        except Exception as exc:  # noqa: BLE001 - reported by the caller's assertion
            results[name] = exc
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in work.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_on_commit_dispatch_and_the_beat_race_on_postgres(queued_backend, funded, staff_user):
    """Two real connections: the approval's on-commit task and the beat take the same
    operation at the same moment. One dispatch, one acknowledgement, no crash, and the rest of
    the beat's batch runs."""
    for _round in range(3):
        # Earlier rounds' operations are not part of this batch.
        Operation.objects.update(next_check_at=timezone.now() + timedelta(days=1))
        first, approved, last = three_with_one_approved(funded, staff_user)
        # First in the beat's batch, so both take it at the same moment; the rest follows.
        Operation.objects.filter(pk=approved.pk).update(
            next_check_at=Operation.objects.get(pk=first.pk).next_check_at - timedelta(seconds=1)
        )
        results = run_together(
            task=lambda pk=approved.pk: operation_dispatch(operation_id=pk),
            beat=operations_process_due,
        )
        assert not [r for r in results.values() if isinstance(r, Exception)], results
        assert results["task"] in ("waiting", "not_due")
        assert sum(results["beat"].values()) in (2, 3)  # `approved` listed or not
        assert set(results["beat"]) <= {"waiting", "not_due"}
        for op in (first, approved, last):
            op = Operation.objects.get(pk=op.pk)
            assert (op.state, op.dispatch_status) == ("waiting", "acknowledged")
        assert history_statuses(approved) == ["queued", "needs_review", "queued", "waiting"]
        assert creates_for(queued_backend, approved) == 1


# --- 2. every terminal operation gets detail_expires_at and is purged ---------------------


def _backend_ends(owner, final: BackendResponse) -> Operation:
    op = submit(owner)
    client = Scripted(create=[answer("queued")], retrieve=[final])
    assert operation_dispatch(operation_id=op.pk, client=client) == "waiting"
    operation_check(operation_id=op.pk, client=client)
    return op


def _succeeded(owner, staff_user):
    return _backend_ends(owner, COMPLETED)


def _failed_by_the_backend(owner, staff_user):
    return _backend_ends(owner, answer("failed", error={"code": "server_error"}))


def _cancelled_by_the_backend(owner, staff_user):
    return _backend_ends(owner, answer("cancelled"))


def _refused_at_dispatch(owner, staff_user):
    op = submit(owner)
    refused = Refused("Invalid value for 'input'.", status=400, payload=None)
    assert operation_dispatch(operation_id=op.pk, client=Scripted(create=[refused])) == "failed"
    return op


def _refused_on_reconciliation(owner, staff_user):
    op = submit(owner)
    client = Scripted(create=[OutcomeUnknown("dropped"), Refused("no", status=400, payload=None)])
    assert operation_dispatch(operation_id=op.pk, client=client) == "reconciling"
    assert operation_reconcile(operation_id=op.pk, client=client) == "failed"
    return op


def _rejected_in_review(owner, staff_user):
    op = submit(owner, category="sensitive")
    operation_review_decide(operation_id=op.pk, staff_user=staff_user, approve=False, note="no")
    return op


@pytest.mark.parametrize(
    ("path", "state"),
    [
        (_succeeded, "succeeded"),
        (_failed_by_the_backend, "failed"),
        (_cancelled_by_the_backend, "cancelled"),
        (_refused_at_dispatch, "failed"),
        (_refused_on_reconciliation, "failed"),
        (_rejected_in_review, "cancelled"),
    ],
    ids=lambda p: getattr(p, "__name__", p).strip("_"),
)
def test_every_terminal_operation_gets_a_detail_expiry_and_its_details_are_purged(
    funded, staff_user, settings, path, state
):
    settings.OPERATIONS_POLL_SECONDS = 0.0
    op = Operation.objects.get(pk=path(funded, staff_user).pk)
    assert op.state == state and op.completed_at is not None
    assert op.detail_expires_at == op.completed_at + timedelta(
        hours=settings.OPERATIONS_DETAIL_TTL_HOURS
    )
    history = history_statuses(op)
    assert operations_expire_details(now=op.detail_expires_at) == 0  # not before it expires
    assert operations_expire_details(now=op.detail_expires_at + timedelta(seconds=1)) == 1
    gone = Operation.objects.get(pk=op.pk)
    assert (gone.detail_expired, gone.result, gone.review) == (True, None, None)
    # The record and its history stay.
    assert gone.state == state and history_statuses(gone) == history
    assert operations_expire_details(now=op.detail_expires_at + timedelta(seconds=1)) == 0


# --- 3. a decided review is null; the decision is in the history --------------------------


@pytest.mark.parametrize(("approve", "state"), [(True, "queued"), (False, "cancelled")])
def test_a_decided_review_is_null_and_the_decision_stays_in_the_history(
    funded, staff_user, approve, state
):
    op = submit(funded, category="sensitive")
    operation_pause(operation_id=op.pk, staff_user=staff_user)
    operation_resume(operation_id=op.pk, staff_user=staff_user)
    waiting = operation_status_payload(Operation.objects.get(pk=op.pk))
    assert waiting["state"] == "needs_review"  # paused and resumed: still waits for a human
    assert waiting["review"]["rule"] == "category:sensitive"
    assert waiting["review"]["decision"] is None

    operation_review_decide(
        operation_id=op.pk, staff_user=staff_user, approve=approve, note="checked the text"
    )
    decided = operation_status_payload(Operation.objects.get(pk=op.pk))
    assert (decided["state"], decided["review"]) == (state, None)
    row = Operation.objects.get(pk=op.pk).history.order_by("timestamp", "id").last()
    verdict = "approved" if approve else "rejected"
    assert (row.status, row.actor_kind, row.actor_user, row.detail) == (
        state,
        "staff",
        staff_user,
        f"{verdict} by staff sam: checked the text",
    )
    assert row.payload["review"] == {
        **waiting["review"],
        "decision": verdict,
        "decided_by": "sam",
        "decided_at": row.payload["review"]["decided_at"],
        "note": "checked the text",
    }


# --- 5. visible changes without a transition are events ----------------------------------


def test_a_backend_problem_bumps_updated_at_and_is_published(
    queued_backend, funded, settings, published, django_capture_on_commit_callbacks
):
    op = submit(funded)
    assert operation_dispatch(operation_id=op.pk) == "waiting"
    before = Operation.objects.get(pk=op.pk)
    published.clear()
    settings.OPERATIONS_BACKEND_URL = f"http://127.0.0.1:{free_port()}"  # backend now down
    with django_capture_on_commit_callbacks(execute=True):
        assert operation_check(operation_id=op.pk) == "unavailable"
    after = Operation.objects.get(pk=op.pk)
    assert "could not connect" in after.last_error
    assert after.updated_at > before.updated_at and after.state == "waiting"
    assert published == [
        {
            "lifecycle": "operation",
            "id": str(op.pk),
            "status": "waiting",
            "uri": f"tong://operation/{op.pk}",
        }
    ]
    assert history_statuses(op) == ["queued", "waiting"]  # not a transition

    # The same problem again changes nothing visible: no write, no event.
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert operation_check(operation_id=op.pk) == "unavailable"
    assert Operation.objects.get(pk=op.pk).updated_at == after.updated_at
    assert published == []


def test_the_dispatch_start_and_the_purge_are_published(
    funded, settings, published, django_capture_on_commit_callbacks
):
    settings.OPERATIONS_BACKEND_URL = f"http://127.0.0.1:{free_port()}"  # nobody listens
    settings.OPERATIONS_POLL_SECONDS = 0.0
    op = submit(funded)
    with django_capture_on_commit_callbacks(execute=True):
        assert operation_dispatch(operation_id=op.pk) == "retry"
    retried = Operation.objects.get(pk=op.pk)
    assert retried.dispatch_started_at is not None and "could not connect" in retried.last_error
    event = {
        "lifecycle": "operation",
        "id": str(op.pk),
        "status": "queued",
        "uri": f"tong://operation/{op.pk}",
    }
    assert published == [event, event]  # the dispatch started; then the backend problem
    assert history_statuses(op) == ["queued"]

    done = Operation.objects.get(pk=_succeeded(funded, None).pk)
    published.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert operations_expire_details(now=done.detail_expires_at + timedelta(seconds=1)) == 1
    assert published == [
        {
            "lifecycle": "operation",
            "id": str(done.pk),
            "status": "succeeded",
            "uri": f"tong://operation/{done.pk}",
        }
    ]
    assert Operation.objects.get(pk=done.pk).updated_at > done.updated_at
