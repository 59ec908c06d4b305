"""Spending permissions stop when they must, on the real chain stack and PostgreSQL:
a deactivated user's agent spends nothing under their permission; the per-agent cap holds
for requests made at once; a Revoke that commits while a transfer is being built leaves that
transfer unsigned by the session key."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.test import Client
from django.utils import timezone

from actions.execution.models import Action, ActionStatus, ActionType
from actions.permissions.follow import spend_permission_destroy_key, spend_permission_follow
from actions.permissions.models import SpendPermission, SpendPermissionStatus
from actions.proposals.services import transfer_propose
from actions.tests.factories import passkey_signs
from core.formats import rfc3339
from core.lifecycle import Actor
from core.users import user_deactivate

from .conftest import usdc_id

pytestmark = [pytest.mark.chain, pytest.mark.postgres]
P = SpendPermissionStatus
MERCHANT = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
# How long a test waits for a thread to reach the point it races on before giving up (the
# outcome is asserted, never the time).
REACH_SECONDS = 120


def _ask(api, token, **overrides):
    body = {
        "asset_id": usdc_id(),
        "amount": "5",
        "period": "weekly",
        "recipients": [MERCHANT],
        "expires_at": rfc3339(timezone.now() + timedelta(days=30)),
        "purpose": "coffee",
        **overrides,
    }
    return api.post("/api/v1/actions/request_spend_permission", token, body)


def _active_permission(api, token, user, passkey) -> SpendPermission:
    answer = _ask(api, token)
    assert answer.status_code == 201, answer.content
    grant = answer.json()
    assert passkey_signs(passkey, user, grant["action_id"]).status == ActionStatus.EXECUTED
    permission = spend_permission_follow(
        SpendPermission.objects.get(grant_action=grant["action_id"])
    )
    assert permission.status == P.ACTIVE and permission.has_key
    return permission


def _transfer(api, token, amount="1"):
    return api.post(
        "/api/v1/actions/transfer", token, {"asset_id": usdc_id(), "amount": amount, "to": MERCHANT}
    )


@pytest.mark.django_db
def test_a_deactivated_users_agent_spends_nothing_under_their_permission(
    make_user_registered,
    api_client,
    application,
    make_token,
    staff_user,
    django_capture_on_commit_callbacks,
):
    user, passkey, _account, _w3 = make_user_registered("leaver")
    token = make_token(user, application, scope="read:actions write:actions")
    permission = _active_permission(api_client, token, user, passkey)
    assert _transfer(api_client, token).json()["status"] == "signed"  # it works before

    with django_capture_on_commit_callbacks(execute=True):
        user_deactivate(user=user, actor=Actor.staff(staff_user))
    permission.refresh_from_db()
    assert permission.status == P.REVOKING and permission.session_key_encrypted == ""
    assert permission.key_destroyed_at is not None
    assert "session key destroyed: the user was deactivated" in [
        h.detail for h in permission.history.all()
    ]
    # The on-chain revocation is proposed, as the user's own Revoke does.
    revoke = Action.objects.get(pk=permission.revoke_action_id)
    assert revoke.type == ActionType.SPEND_REVOKE and revoke.status == ActionStatus.PROPOSED
    # The agent's call is refused; its token is gone.
    refused = _transfer(api_client, token)
    assert refused.status_code == 401 and 'error="invalid_token"' in refused["WWW-Authenticate"]

    # Reactivated: the key does not come back, so a transfer needs the passkey.
    user.is_active = True
    user.save()
    signed = Action.objects.filter(spend_permission=permission, status=ActionStatus.SIGNED)
    before = signed.count()
    again = transfer_propose(
        user=user, application=application, asset_id=usdc_id(), amount="1", to=MERCHANT
    )
    assert again.status == ActionStatus.PROPOSED and again.spend_permission_id is None
    assert [r["code"] for r in again.params["permission_reasons"]] == ["revoking"]
    assert signed.count() == before
    permission.refresh_from_db()
    assert permission.session_key_encrypted == "" and permission.status == P.REVOKING


@pytest.mark.django_db(transaction=True)
def test_the_per_agent_cap_holds_for_requests_made_at_once(
    make_user_registered, api_client, application, make_token, settings
):
    if connection.vendor != "postgresql":
        pytest.skip("the race needs row locks (PostgreSQL)")
    cap = settings.SPEND_PERMISSIONS_PER_AGENT
    asked = cap + 6
    user, _passkey, _account, _w3 = make_user_registered("eager")
    token = make_token(user, application, scope="read:actions write:actions")
    barrier = threading.Barrier(asked)
    answers: list[tuple[int, str]] = []

    def ask(n: int) -> None:
        try:
            barrier.wait()
            # A client of its own per thread.
            response = _ask(type(api_client)(Client()), token, purpose=f"coffee {n}")
            answers.append((response.status_code, response.content.decode()))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(asked)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    codes = sorted(code for code, _ in answers)
    assert codes == [201] * cap + [400] * (asked - cap), answers
    assert all("too_many_permissions" in body for code, body in answers if code == 400)
    assert SpendPermission.objects.filter(user=user, application=application).count() == cap
    assert Action.objects.filter(user=user, type=ActionType.SPEND_GRANT).count() == cap


def _someone_waits_for_me() -> bool:
    """Whether another session waits for a lock this transaction holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            # pg_locks, not pg_stat_activity: that one is a snapshot taken once per transaction.
            "SELECT count(*) FROM pg_locks "
            "WHERE NOT granted AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_a_revoke_committed_while_a_transfer_is_built_leaves_it_unsigned(
    make_user_registered, api_client, application, make_token
):
    if connection.vendor != "postgresql":
        pytest.skip("the race needs row locks (PostgreSQL)")
    user, passkey, _account, _w3 = make_user_registered("racer")
    token = make_token(user, application, scope="read:actions write:actions")
    permission = _active_permission(api_client, token, user, passkey)
    answers: list = []

    def transfer() -> None:
        try:
            answers.append(
                transfer_propose(
                    user=user, application=application, asset_id=usdc_id(), amount="1", to=MERCHANT
                )
            )
        except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
            answers.append(exc)
        finally:
            connections.close_all()

    # The Revoke's key destruction, held open: the transfer reads the key (committed, still
    # there), builds and estimates its op, and reaches the signing while this is uncommitted.
    thread = threading.Thread(target=transfer)
    with transaction.atomic():
        SpendPermission.objects.select_for_update().get(pk=permission.pk)
        assert spend_permission_destroy_key(
            permission=permission, actor=Actor.end_user(user), why="the user revoked it"
        )
        thread.start()
        deadline = time.monotonic() + REACH_SECONDS
        while thread.is_alive() and not _someone_waits_for_me() and time.monotonic() < deadline:
            time.sleep(0.05)
    thread.join()
    [answer] = answers
    assert isinstance(answer, Action), answer
    answer.refresh_from_db()
    # Not signed by the destroyed key: proposed for the passkey, saying why.
    assert answer.status == ActionStatus.PROPOSED and answer.spend_permission_id is None
    assert [r["code"] for r in answer.params["permission_reasons"]] == ["revoking"]
    assert not Action.objects.filter(type=ActionType.TRANSFER, spend_permission=permission).exists()
    assert not answer.history.filter(detail__startswith="signed by permission").exists()
