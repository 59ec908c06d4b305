"""Spending permissions without a chain: the request checked whole (4xx with the reason,
nothing installed), the lifecycle following its grant and revoke actions, the session key
sealed at rest and destroyed whenever a grant ends, the expiry sweep, and one agent never
seeing nor using another's permission. The chain side is test_spend_permissions_chain.py."""

from __future__ import annotations

from datetime import UTC, timedelta
from datetime import timezone as dt_timezone

import pytest
from cryptography.fernet import Fernet
from django.db import IntegrityError, transaction
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.execution.services import action_submit
from actions.permissions import session_keys
from actions.permissions.follow import (
    spend_permission_destroy_key,
    spend_permission_follow,
    spend_permissions_sweep,
)
from actions.permissions.models import SpendPermission, SpendPermissionStatus
from actions.permissions.reasons import note_text, stored
from actions.permissions.revoking import spend_permissions_revoke
from actions.permissions.spending import permission_for_transfer
from actions.tests.factories import (
    MERCHANT,
    made_up_address,
    make_action,
    make_offline_wallet,
    make_permission,
)
from core.chains import chain_name
from core.formats import rfc3339
from core.lifecycle import Actor, transition
from core.schema import parse_date_time
from evm import spend_permission as chain_permission

pytestmark = pytest.mark.django_db

P = SpendPermissionStatus
USDC = f"eip155:31337/erc20:{made_up_address('USDC')}"
PATH = "/api/v1/actions/request_spend_permission"


@pytest.fixture
def wallet(user, monkeypatch):
    return make_offline_wallet(user, monkeypatch)


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application, scope="read:actions write:actions")


def _in(days: float) -> str:
    return rfc3339(timezone.now() + timedelta(days=days))


def _ask(api_client, token, **overrides):
    body = {
        "asset_id": USDC,
        "amount": "50",
        "period": "weekly",
        "recipients": [MERCHANT],
        "expires_at": _in(30),
        "purpose": "the weekly groceries",
    }
    body.update(overrides)
    return api_client.post(PATH, token, {k: v for k, v in body.items() if v is not None})


@pytest.mark.parametrize(
    ("overrides", "status", "said"),
    [
        ({"asset_id": "eip155:31337/erc20:0x" + "99" * 20}, 400, "Unknown token"),
        ({"amount": "-5"}, 400, "amount"),
        ({"amount": "0"}, 400, "greater than zero"),
        ({"amount": str(2**160)}, 400, "too large for a permission"),
        ({"expires_at": _in(-1)}, 400, "expires_at is in the past"),
        ({"starts_at": _in(10), "expires_at": _in(5)}, 400, "expires_at must be after starts_at"),
        ({"starts_at": _in(-2)}, 400, "starts_at is in the past"),
        ({"expires_at": "next tuesday"}, 400, "RFC 3339"),
        ({"expires_at": _in(4000)}, 400, "at most 366 days"),
        ({"recipients": []}, 400, "recipients is empty"),
        ({"recipients": None}, 400, "recipients is empty"),
        ({"any_recipient": True}, 400, "not both"),
        ({"recipients": ["a_b.eth"]}, 400, "not a valid ENS name"),
        ({"recipients": ["0x" + "00" * 20]}, 400, "zero address"),
        ({"period": "hourly"}, 400, "period"),
        ({"to_asset_id": "eip155:31337/erc20:0x" + "99" * 20}, 400, "Unknown token"),
        ({"to_asset_id": "EURe"}, 400, "to_asset_id"),
        ({"to_asset_id": USDC}, 400, "the permission's own token"),
        (
            {"to_asset_id": f"eip155:31338/erc20:{made_up_address('EURe')}"},
            400,
            "a bridge's output cannot be checked on the source chain",
        ),
    ],
)
def test_a_malformed_request_is_refused_with_its_reason_and_installs_nothing(
    wallet, api_client, token, overrides, status, said
):
    response = _ask(api_client, token, **overrides)
    assert response.status_code == status, response.content
    assert said in response.content.decode()
    assert not SpendPermission.objects.exists()
    assert not Action.objects.exists()


def test_the_grant_follows_its_action_and_a_grant_that_ends_destroys_its_key(
    wallet, user, application
):
    permission = make_permission(
        user=user, application=application, account=wallet, status=P.REQUESTED
    )
    grant = permission.grant_action
    transition(
        lifecycle=ACTION_LIFECYCLE, pk=grant.pk, to=ActionStatus.SIGNED, actor=Actor.end_user(user)
    )
    assert spend_permission_follow(permission).status == P.GRANTING
    transition(
        lifecycle=ACTION_LIFECYCLE, pk=grant.pk, to=ActionStatus.SUBMITTED, actor=Actor.worker()
    )
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=grant.pk,
        to=ActionStatus.FAILED,
        actor=Actor.worker(),
        updates={"error": "AA23 reverted"},
    )
    permission = spend_permission_follow(permission)
    assert permission.status == P.FAILED and permission.error == "AA23 reverted"
    assert permission.session_key_encrypted == "" and permission.key_destroyed_at
    assert [h.status for h in permission.history.order_by("pk")] == [
        P.REQUESTED,
        P.GRANTING,
        P.FAILED,
    ]


def test_an_executed_grant_makes_the_permission_active(wallet, user, application):
    permission = make_permission(
        user=user, application=application, account=wallet, status=P.REQUESTED
    )
    Action.objects.filter(pk=permission.grant_action_id).update(
        status=ActionStatus.EXECUTED, tx_hash="0x" + "ee" * 32, block_number=7
    )
    permission = spend_permission_follow(permission)
    assert permission.status == P.ACTIVE and permission.granted_at and permission.has_key
    assert permission.history.order_by("-pk").first().detail.startswith("granted on chain")


def test_an_unsigned_grant_is_declined_by_the_sweep(wallet, user, application):
    permission = make_permission(
        user=user, application=application, account=wallet, status=P.REQUESTED
    )
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=permission.grant_action_id,
        to=ActionStatus.EXPIRED,
        actor=Actor.system(),
    )
    assert spend_permissions_sweep() == 1
    permission.refresh_from_db()
    assert permission.status == P.DECLINED and not permission.has_key


def test_the_sweep_expires_a_permission_past_its_end_and_destroys_its_key(
    wallet, user, application
):
    permission = make_permission(user=user, application=application, account=wallet)
    later = permission.expires_at + timedelta(seconds=1)
    assert spend_permissions_sweep(now=later) == 1
    permission.refresh_from_db()
    assert permission.status == P.EXPIRED and permission.session_key_encrypted == ""
    row = permission.history.order_by("-pk").first()
    assert row.actor_kind == "system" and "session key is destroyed" in row.detail
    assert spend_permissions_sweep(now=later) == 0  # once


def test_an_ended_permission_cannot_hold_a_key(wallet, user, application):
    permission = make_permission(user=user, application=application, account=wallet)
    with pytest.raises(IntegrityError), transaction.atomic():
        SpendPermission.objects.filter(pk=permission.pk).update(status=P.REVOKED)


def test_the_session_key_is_sealed_with_the_configured_keys_and_rotates(settings):
    _, key = chain_permission.new_session_key()
    sealed = session_keys.seal(key)
    assert key.hex() not in sealed and session_keys.unseal(sealed) == key
    # A new key first: old tokens still open, new ones are sealed with the new key.
    settings.SPEND_PERMISSION_KEYS = [
        Fernet.generate_key().decode(),
        *settings.SPEND_PERMISSION_KEYS,
    ]
    assert session_keys.unseal(sealed) == key
    settings.SPEND_PERMISSION_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(session_keys.SessionKeyUnavailable, match="cannot be decrypted"):
        session_keys.unseal(sealed)
    with pytest.raises(session_keys.SessionKeyUnavailable, match="destroyed"):
        session_keys.unseal("")


def test_a_transfer_outside_the_permission_says_why(wallet, user, application, make_application):
    permission = make_permission(user=user, application=application, account=wallet)
    usdc = permission.token
    found, why = permission_for_transfer(
        user=user,
        application=application,
        token=usdc,
        recipient="0x" + "77" * 20,
        recipient_shown="merchant2.eth",
        units=1,
    )
    assert found is None and note_text(why) == "merchant2.eth is not in the permission's recipients"
    # What the signing page translates: the code and what the sentence needs.
    assert stored(why) == [{"code": "recipient", "name": "groceries", "recipient": "merchant2.eth"}]
    # Another agent holds nothing here: no permission, and no reason naming another's.
    other = make_application("other-agent")
    assert permission_for_transfer(
        user=user,
        application=other,
        token=usdc,
        recipient=MERCHANT,
        recipient_shown=MERCHANT,
        units=1,
    ) == (None, [])
    SpendPermission.objects.filter(pk=permission.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    found, why = permission_for_transfer(
        user=user,
        application=application,
        token=usdc,
        recipient=MERCHANT,
        recipient_shown=MERCHANT,
        units=1,
    )
    assert found is None and note_text(why) == "the permission expired"
    assert stored(why) == [{"code": "expired", "name": "groceries"}]


def test_a_transfer_after_the_permission_ended_says_so(wallet, user, application):
    """A revoked or expired permission is not silently gone: the agent is told why it now
    needs the user's passkey (the latest one that ended)."""
    permission = make_permission(user=user, application=application, account=wallet)

    def note() -> str:
        why = permission_for_transfer(
            user=user,
            application=application,
            token=permission.token,
            recipient=MERCHANT,
            recipient_shown="merchant.eth",
            units=1,
        )[1]
        assert len(why) == 1
        return note_text(why)

    assert spend_permissions_sweep(now=permission.expires_at + timedelta(seconds=1)) == 1
    assert note() == "the permission “groceries” expired"
    make_permission(
        user=user,
        application=application,
        account=wallet,
        status=P.REVOKED,
        name="coffee",
        session_key_encrypted="",
        starts_at=timezone.now(),
    )
    assert note() == "the permission “coffee” was revoked"


def test_an_agent_reads_only_its_own_permissions(
    wallet, user, application, make_application, make_token, api_client
):
    make_permission(user=user, application=application, account=wallet, status=P.REQUESTED)
    other = make_application("other-agent")
    mine = api_client.get("/api/v1/spend-permissions", make_token(user, application)).json()
    theirs = api_client.get("/api/v1/spend-permissions", make_token(user, other)).json()
    assert [p["name"] for p in mine["permissions"]] == ["groceries"]
    assert mine["permissions"][0]["status"] == "requested"
    assert "session" not in str(mine)
    assert theirs == {"permissions": []}


def test_revoking_a_grant_not_yet_signed_withdraws_it_and_destroys_the_key(
    wallet, user, application
):
    permission = make_permission(
        user=user, application=application, account=wallet, status=P.REQUESTED
    )
    actions = spend_permissions_revoke(
        user=user, permission_ids=[permission.pk], actor=Actor.end_user(user), why="test"
    )
    assert actions == []  # nothing on chain to revoke
    permission.refresh_from_db()
    assert permission.status == P.DECLINED and not permission.has_key
    grant = Action.objects.get(pk=permission.grant_action_id)
    assert grant.status == ActionStatus.REJECTED and "withdrawn" not in grant.params
    details = [h.detail for h in permission.history.order_by("pk")]
    assert "session key destroyed: test" in details


def test_disconnecting_an_agent_ends_only_its_permissions(
    wallet, user, application, make_application, client
):
    mine = make_permission(user=user, application=application, account=wallet, status=P.REQUESTED)
    other_app = make_application("other-agent")
    theirs = make_permission(user=user, application=other_app, account=wallet, status=P.REQUESTED)
    client.force_login(user)
    response = client.post(f"/agents/{application.pk}/revoke")
    assert response.status_code == 302
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.status == P.DECLINED and not mine.has_key
    assert theirs.status == P.REQUESTED and theirs.has_key
    # The grant's signing page says the disconnection withdrew it (not "you rejected").
    grant = Action.objects.get(pk=mine.grant_action_id)
    assert (grant.status, grant.params["withdrawn"]) == ("rejected", "agent_disconnected")
    assert "withdrawn" not in Action.objects.get(pk=theirs.grant_action_id).params


def test_staff_see_permissions_but_never_the_key(wallet, user, application, staff_client):
    permission = make_permission(user=user, application=application, account=wallet)
    for url in (
        "/admin/actions/spendpermission/",
        f"/admin/actions/spendpermission/{permission.pk}/change/",
        f"/staff/spend-permissions/{permission.pk}/",
    ):
        page = staff_client.get(url)
        assert page.status_code == 200, url
        assert permission.session_key_encrypted not in page.content.decode()
        assert "groceries" in page.content.decode()
    timeline = staff_client.get(f"/staff/spend-permissions/{permission.pk}/").content.decode()
    assert '<dt>Chain</dt><dd><span class="chain" data-chain-id="31337"' in timeline


def test_the_user_page_lists_permissions_with_a_revoke_button(wallet, user, application, client):
    permission = make_permission(
        user=user, application=application, account=wallet, status=P.REQUESTED
    )
    client.force_login(user)
    page = client.get("/permissions/").content.decode()
    assert f'id="revoke-{permission.pk}"' in page
    assert "may send up to 50 USDC per week to merchant.eth" in page
    assert permission.session_key_encrypted not in page


def test_the_user_page_names_the_network_and_who_was_paid(wallet, user, application, client):
    permission = make_permission(user=user, application=application, account=wallet)
    spend = make_action(
        user=user,
        application=application,
        params={"amount": "5", "symbol": "USDC", "to": MERCHANT, "ens": "merchant.eth"},
    )
    Action.objects.filter(pk=spend.pk).update(spend_permission=permission)
    client.force_login(user)
    page = client.get("/permissions/").content.decode()
    # The chain's name (its id only on hover), and the name the agent paid beside the address.
    assert 'data-chain-id="31337"' in page and f">{chain_name(31337)}</span>" in page
    assert f'<td data-label="To"><strong>merchant.eth</strong> <code>{MERCHANT}</code></td>' in page


def test_a_spend_signed_before_its_key_was_destroyed_is_not_sent(wallet, user, application):
    """The key was destroyed (Revoke, Disconnect, deactivation) between the signing and the
    submission: the worker fails the spend with the reason and never calls the bundler (this
    wallet has no chain: a call would be an error, not this reason)."""
    permission = make_permission(user=user, application=application, account=wallet)
    spend = make_action(
        user=user,
        application=application,
        smart_account=wallet.address,
        params={"amount": "1", "to": MERCHANT, "spend_permission": str(permission.pk)},
    )
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=spend.pk,
        to=ActionStatus.SIGNED,
        actor=Actor.system(),
        updates={"spend_permission": permission},
        detail="signed by permission groceries for mcp-agent",
    )
    spend_permission_destroy_key(permission=permission, actor=Actor.end_user(user), why="test")
    sent = action_submit(action_id=spend.pk)
    assert sent.status == ActionStatus.FAILED
    assert "session key was destroyed" in sent.error
    assert list(sent.history.values_list("status", flat=True).order_by("pk")) == [
        ActionStatus.PROPOSED,
        ActionStatus.SIGNED,
        ActionStatus.FAILED,
    ]


@pytest.mark.parametrize(
    "value",
    [
        "2027-13-01T00:00:00Z",  # month 13
        "2027-02-30T00:00:00Z",  # 30 February
        "2027-02-29T00:00:00Z",  # not a leap year
        "2027-03-01T24:00:00Z",  # hour 24
        "2027-03-01T00:00:00+23:59",  # grammatical, but no clock shows it
        "2027-03-01T00:00:00+2359",  # offset without its colon
        "2027-03-01T23:59:60Z",  # a leap second: a datetime cannot hold it
        "9999-12-31T23:00:00-14:00",  # not a UTC instant a datetime holds
        "2027-03-01T00:00:00",  # no time zone
        "2027-03-01T00:00:00Z\n",
    ],
)
@pytest.mark.parametrize("field", ["starts_at", "expires_at"])
def test_an_invalid_date_is_a_400_naming_its_field(wallet, api_client, token, field, value):
    """Month 13, 30 February and hour 24 answered 500 (the service's parser raised)."""
    response = _ask(api_client, token, **{field: value})
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_input"
    assert list(body["errors"]) == [field]
    assert "RFC 3339 date-time" in body["errors"][field][0]
    assert not SpendPermission.objects.exists()
    assert not Action.objects.exists()


@pytest.mark.parametrize("field", ["starts_at", "expires_at"])
def test_a_60_kb_date_is_refused_without_being_echoed(wallet, api_client, token, field):
    value = "2027-03-01T00:00:00Z" + "9" * 60_000
    response = _ask(api_client, token, **{field: value})
    assert response.status_code == 400
    assert len(response.content) < 2_000
    assert not SpendPermission.objects.exists()


@pytest.mark.parametrize(
    "expires_at",
    [
        "2028-02-29T00:00:00Z",  # a leap day
        "2028-02-29T23:59:59.999999+05:30",
        "2028-02-29t12:00:00z",  # RFC 3339 allows t and z
        "2028-02-29T12:00:00.123456789-14:00",  # nanoseconds: cut to microseconds
    ],
)
def test_valid_edge_dates_pass_the_checks_as_the_instant_they_name(
    wallet, api_client, token, settings, expires_at
):
    """Past every date check the request goes on to the chain, closed here: its 503 says the
    dates were taken (a refused date is a 400 before any chain read)."""
    settings.SPEND_PERMISSION_MAX_DAYS = 1000  # the leap day is more than a year away
    india = dt_timezone(timedelta(hours=5, minutes=30))
    starts = (timezone.now() + timedelta(days=1)).astimezone(india).replace(microsecond=0)
    response = _ask(api_client, token, starts_at=starts.isoformat(), expires_at=expires_at)
    assert response.status_code == 503, response.content
    assert response.json()["code"] == "chain_unavailable"
    assert not SpendPermission.objects.exists()
    # Each names 2028-02-29 in its own zone, whatever the offset.
    instant = parse_date_time(expires_at)
    assert instant.tzinfo is not None
    assert instant.date().isoformat() == "2028-02-29"
    assert parse_date_time(starts.isoformat()) == starts


@pytest.mark.parametrize(
    "value",
    ["2028-02-29T23:59:59.999999+05:30", "2028-02-29T12:00:00.123456789-14:00"],
)
def test_an_offset_date_names_its_instant(value):
    utc = parse_date_time(value).astimezone(UTC)
    assert utc.isoformat() in (
        "2028-02-29T18:29:59.999999+00:00",
        "2028-03-01T02:00:00.123456+00:00",
    )
