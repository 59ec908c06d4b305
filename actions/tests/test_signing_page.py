"""What the signing page tells the end user, status by status, and when its polling stops.

No chain here: the bundler and the RPC point at a closed port, so the refresh a poll does
(`action_status_refresh`) runs for real and learns nothing — the page shows what is stored.
"""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from unittest import mock

import pytest
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionType
from actions.tests.factories import make_action, make_chain_unreachable
from core.lifecycle import Actor, transition

pytestmark = pytest.mark.django_db

S = ActionStatus
TX = "0x" + "ab" * 30 + "cdef"
BUNDLER_REFUSAL = (
    "bundler rejected (-32500): UserOperation reverted with reason: AA26 over verificationGasLimit"
)
REVERT = (
    "ERC20InsufficientBalance(0x1234567890123456789012345678901234567890, 10000000, 1000000000)"
)


@pytest.fixture(autouse=True)
def offline(settings):
    make_chain_unreachable(settings)


@pytest.fixture
def owner_client(client, user):
    client.force_login(user)
    return client


def advance(action: Action, *steps: str, **updates) -> Action:
    """Walk the action through `steps`; `updates` go with the last move."""
    for i, step in enumerate(steps):
        transition(
            lifecycle=ACTION_LIFECYCLE,
            pk=action.pk,
            to=step,
            actor=Actor.system(),
            updates=updates if i == len(steps) - 1 else None,
        )
    return Action.objects.get(pk=action.pk)


@pytest.fixture
def action_after(user, application):
    """`user`'s proposed transfer walked through `steps`; `updates` go with the last move."""

    def make(*steps: str, **updates) -> Action:
        return advance(make_action(user=user, application=application), *steps, **updates)

    return make


def page(client, action: Action):
    return client.get(f"/sign/{action.pk}/")


def poll(client, action: Action, version: str = "old"):
    """What htmx sends every 2 s: the partial, with the version it last saw."""
    return client.get(f"/sign/{action.pk}/", {"u": version}, HTTP_HX_REQUEST="true")


def text(response) -> str:
    """The visible words of a response, whitespace collapsed."""
    body = re.sub(r"</?(code|strong|span|em|a)\b[^>]*>", "", response.content.decode())
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", body)).split())


def polled_version(response) -> str | None:
    """The `u=` the rendered partial will poll with next (None: the partial does not poll)."""
    found = re.search(r'hx-get="[^"]*\?u=([^"&]+)"', response.content.decode())
    return found and unescape(found[1])


def status_of(response) -> str:
    return re.search(r'data-status="([a-z]+)"', response.content.decode())[1]


# --- failed: the reason in plain words, and polling stops ---------------------------------


def test_a_bundler_refusal_shows_the_plain_reason_and_never_executing(owner_client, action_after):
    action = action_after(
        S.SIGNED,
        S.SUBMITTED,
        S.FAILED,
        error=BUNDLER_REFUSAL,
    )
    for response in (page(owner_client, action), poll(owner_client, action)):
        words = text(response)
        assert status_of(response) == "failed"
        assert "executing" not in words.lower()
        lead = (
            "The transfer could not be completed: the network refused it before it reached "
            "the chain (too little gas was set aside for checking your signature). Nothing "
            "was sent and your funds did not move."
        )
        assert lead in words
        # The provider's words follow the plain sentence, never lead.
        assert BUNDLER_REFUSAL in words
        assert words.index(lead) < words.index(BUNDLER_REFUSAL)
        assert "Approve with passkey" not in words
        assert polled_version(response) is None  # the rendered partial polls no more


def test_the_partial_of_a_failed_action_answers_286_to_stop_htmx_polling(
    owner_client, action_after
):
    action = action_after(
        S.SIGNED,
        S.SUBMITTED,
        S.FAILED,
        error=BUNDLER_REFUSAL,
    )
    response = poll(owner_client, action)
    assert response.status_code == 286
    assert 'id="failed"' in response.content.decode()
    # Even a poll that already saw this very version gets the final state and the stop.
    full = page(owner_client, action)
    assert poll(owner_client, action, version="anything").status_code == 286
    assert full.status_code == 200 and polled_version(full) is None


def test_a_status_seen_as_executing_then_failing_is_replaced_by_the_failure(
    owner_client, action_after
):
    """The page a user left open at "executing…" learns the end at its next poll."""
    action = action_after(S.SIGNED, S.SUBMITTED)
    Action.objects.filter(pk=action.pk).update(error=BUNDLER_REFUSAL)  # no updated_at bump
    seen = page(owner_client, action)
    version = polled_version(seen)
    assert version and "Signed; executing…" in text(seen)
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=S.FAILED,
        actor=Actor.system(),
        updates={"error": BUNDLER_REFUSAL},
    )
    response = poll(owner_client, action, version)
    assert response.status_code == 286
    assert "The transfer could not be completed" in text(response)
    assert "executing" not in text(response).lower()


def test_an_on_chain_revert_says_what_happened_then_shows_the_revert(
    owner_client, user, application
):
    action = make_action(
        user=user,
        application=application,
        params={"amount": "1000", "symbol": "USDC", "to": "0x7099", "asset_id": "x"},
    )
    action = advance(
        action,
        S.SIGNED,
        S.SUBMITTED,
        S.BROADCAST,
        S.FAILED,
        error=REVERT,
        tx_hash=TX,
        block_number=12,
    )
    words = text(page(owner_client, action))
    assert (
        "The transfer could not be completed: your account did not hold enough USDC. It was "
        "undone on chain, so your tokens did not move" in words
    )
    assert REVERT in words
    assert "executing" not in words.lower()


@pytest.mark.parametrize(
    ("kind", "error", "expected"),
    [
        (
            ActionType.TRANSFER,
            "dropped: nonce used by another operation",
            "The transfer could not be completed: another operation from your account used "
            "its place first",
        ),
        (
            ActionType.TRANSFER,
            "bundler rejected (-32500): AA21 didn't pay prefund",
            "(your account does not hold enough ETH to pay the network fee)",
        ),
        (
            ActionType.TRANSFER,
            "bundler rejected (-32602): invalid fields",
            "the network refused it before it reached the chain. Nothing was sent",
        ),
        (
            ActionType.SWAP,
            "marked failed by staff: the bundler lost it",
            "The swap was stopped by our support team and will not run.",
        ),
        (
            ActionType.CARD_FREEZE,
            "Gnosis Pay refused the sign-in: 401 invalid signature",
            "Freezing your card could not be completed: your card provider refused it.",
        ),
        (
            ActionType.CARD_LIMIT_SET,
            "expired in the delay module",
            "The daily limit change could not be completed: it was not carried out in time",
        ),
    ],
)
def test_each_kind_of_failure_leads_with_a_plain_sentence(
    owner_client, user, application, kind, error, expected
):
    action = advance(
        make_action(user=user, application=application, type=kind),
        S.SIGNED,
        S.SUBMITTED,
        S.FAILED,
        error=error,
    )
    words = text(page(owner_client, action))
    assert expected in words
    assert error in words
    assert "executing" not in words.lower()


# --- in flight: executing, retrying, polling goes on --------------------------------------


def test_a_submitted_action_with_an_error_says_it_is_retrying_and_polls_on(
    owner_client, action_after
):
    action = action_after(S.SIGNED, S.SUBMITTED)
    Action.objects.filter(pk=action.pk).update(
        error=BUNDLER_REFUSAL.replace("rejected", "unreachable")
    )
    first = poll(owner_client, action)
    assert first.status_code == 200  # not 286: htmx keeps polling
    words = text(first)
    assert status_of(first) == "submitted"
    assert "we are trying again automatically" in words
    assert "You don't need to do anything" in words
    assert "bundler" not in words.lower() and "AA26" not in words  # no raw library text
    version = polled_version(first)
    assert version  # the partial keeps its hx-get
    # Nothing changed since: 204, nothing to swap, and still not a stop.
    again = poll(owner_client, action, version)
    assert again.status_code == 204


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ((S.SIGNED,), "Signed; executing…"),
        ((S.SIGNED, S.SUBMITTED), "Signed; executing…"),
        ((S.SIGNED, S.SUBMITTED, S.BROADCAST), "waiting for it to be included in a block"),
    ],
)
def test_in_flight_statuses_say_executing_and_keep_polling(
    owner_client, action_after, steps, expected
):
    action = action_after(*steps)
    response = poll(owner_client, action)
    assert response.status_code == 200
    assert expected in text(response)
    assert "could not be completed" not in text(response)
    assert polled_version(response)


def test_an_error_written_without_a_transition_still_reaches_an_open_page(
    owner_client, action_after
):
    """The poll's version covers the error itself, not only `updated_at`."""
    action = action_after(S.SIGNED, S.SUBMITTED)
    version = polled_version(poll(owner_client, action))
    assert poll(owner_client, action, version).status_code == 204
    Action.objects.filter(pk=action.pk).update(error="bundler unreachable: timed out")
    response = poll(owner_client, action, version)
    assert response.status_code == 200 and "trying again automatically" in text(response)


# --- proposed: the time left moves, then it expires ---------------------------------------


def time_left(response) -> tuple[int, str]:
    body = response.content.decode()
    ms = int(re.search(r'id="time-left" data-ms-left="(\d+)"', body)[1])
    shown = re.search(r"Time left to sign: (.+?) The request expires at", text(response))[1]
    return ms, shown


def test_the_time_left_to_sign_decreases_and_then_the_page_shows_expired(
    owner_client, user, application
):
    action = make_action(user=user, application=application, ttl_seconds=900)
    deadline = action.expires_at
    renders = []
    for left in (timedelta(minutes=10), timedelta(minutes=3, seconds=7), timedelta(seconds=42)):
        with mock.patch("django.utils.timezone.now", return_value=deadline - left):
            response = page(owner_client, action)
        assert response.status_code == 200 and status_of(response) == "proposed"
        assert 'id="approve"' in response.content.decode()
        renders.append(time_left(response))
    assert renders == [(600_000, "10:00"), (187_000, "3:07"), (42_000, "0:42")]

    version = polled_version(poll(owner_client, action))
    assert poll(owner_client, action, version).status_code == 204  # still proposed, unchanged
    with mock.patch("django.utils.timezone.now", return_value=deadline + timedelta(seconds=1)):
        response = poll(owner_client, action, version)
    assert response.status_code == 286
    assert status_of(response) == "expired"
    assert "This request expired before it was signed" in text(response)
    assert 'id="approve"' not in response.content.decode()
    assert Action.objects.get(pk=action.pk).status == "expired"


def test_the_countdown_script_is_served_from_our_origin_without_inline_script(
    owner_client, user, application
):
    response = page(owner_client, make_action(user=user, application=application))
    body = response.content.decode()
    assert re.search(r'<script src="/static/picnic/passkeys\.js"></script>', body)
    assert "<script>" not in body and "onclick" not in body
    assert "script-src 'self'" in response["Content-Security-Policy"]
    from django.contrib.staticfiles import finders

    with open(finders.find("picnic/passkeys.js")) as script:
        source = script.read()
    assert "dataset.msLeft" in source and "time-left-value" in source


def test_a_proposed_poll_does_not_stop(owner_client, user, application):
    action = make_action(user=user, application=application)
    response = poll(owner_client, action)
    assert response.status_code == 200 and polled_version(response)
    assert poll(owner_client, action, polled_version(response)).status_code == 204


# --- the other ends: executed, expired, rejected ------------------------------------------


def test_an_executed_action_shows_done_with_the_short_transaction_hash(owner_client, action_after):
    action = action_after(
        S.SIGNED,
        S.SUBMITTED,
        S.BROADCAST,
        S.EXECUTED,
        tx_hash=TX,
        block_number=1234,
    )
    response = poll(owner_client, action)
    assert response.status_code == 286
    words = text(response)
    assert status_of(response) == "executed"
    assert "Done." in words
    # The block and transaction are technical words: under "Technical details".
    technical = re.search(
        r'<details class="technical" id="done-technical">.*?</details>',
        response.content.decode(),
        re.S,
    )[0]
    assert (
        f'Included in block 1234, transaction <code title="{TX}">{TX[:10]}…{TX[-8:]}</code>.'
        in technical
    )
    assert f'title="{TX}"' in response.content.decode()
    assert "<a " not in re.search(r'<p id="done">.*?</p>', response.content.decode(), re.S)[0]
    assert "executing" not in words.lower()


def test_an_executed_card_freeze_says_the_card_is_frozen(owner_client, user, application):
    action = make_action(
        user=user, application=application, type=ActionType.CARD_FREEZE, user_op=None
    )
    action = advance(action, S.SIGNED, S.SUBMITTED, S.EXECUTED)
    assert "Done. Your card is frozen." in text(page(owner_client, action))


def test_expired_and_rejected_are_final_and_say_nothing_was_sent(
    owner_client, action_after, user, application
):
    rejected = action_after(S.REJECTED)
    response = poll(owner_client, rejected)
    assert response.status_code == 286
    assert "You rejected this request. Nothing was sent." in text(response)

    expired = make_action(user=user, application=application)
    Action.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = page(owner_client, expired)
    assert status_of(response) == "expired" and polled_version(response) is None
    assert "Nothing was sent" in text(response)


def test_someone_else_gets_a_refusal_that_names_nothing(client, other_user, user, application):
    action = make_action(user=user, application=application)
    client.force_login(other_user)
    for response in (page(client, action), poll(client, action)):
        assert response.status_code == 403
        assert str(action.pk) not in response.content.decode()
        assert "USDC" not in response.content.decode()


# --- disconnecting the agent withdraws what it proposed --------------------------------------


def test_disconnecting_an_agent_withdraws_its_unsigned_proposals_and_signing_is_refused(
    owner_client, user, application, make_application
):
    waiting = make_action(user=user, application=application)
    signed = advance(make_action(user=user, application=application), S.SIGNED)
    other = make_action(user=user, application=make_application("other-agent"))

    answer = owner_client.post(f"/agents/{application.pk}/revoke")

    assert answer.status_code == 302
    waiting.refresh_from_db()
    assert waiting.status == S.REJECTED
    assert waiting.params["withdrawn"] == "agent_disconnected"
    assert waiting.params["amount"] == "1.5"  # the proposal itself is kept as it was
    last = waiting.history.order_by("pk").last()
    assert (last.from_status, last.status) == (S.PROPOSED, S.REJECTED)
    assert last.detail == "withdrawn: the agent was disconnected"
    # Signed before the disconnection: the user approved it, it goes on. Another agent's
    # proposal is not touched.
    assert Action.objects.get(pk=signed.pk).status == S.SIGNED
    assert Action.objects.get(pk=other.pk).status == S.PROPOSED

    page = owner_client.get(f"/sign/{waiting.pk}/").content.decode()
    assert 'id="withdrawn"' in page and "you disconnected the app" in page
    assert 'id="approve"' not in page and 'id="rejected"' not in page

    for url, status in ((f"/sign/{waiting.pk}/options", 400), (f"/sign/{waiting.pk}/approve", 409)):
        refused = owner_client.post(url, "{}", content_type="application/json")
        assert refused.status_code == status, url
        body = refused.json()
        assert body["code"] == "agent_disconnected" and body["errors"] == {} and body["error"]
    assert Action.objects.get(pk=waiting.pk).status == S.REJECTED
    assert waiting.history.count() == 2
