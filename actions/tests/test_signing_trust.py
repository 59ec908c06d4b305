"""The signing page earns trust: who asks (the agent, since when, its first request flagged),
who receives (a name with the full address, a first-time recipient, a look-alike of a known
address), what changes (the balance before and after), when (the user's own time zone, from
the browser, stored with the user). Names from outside are escaped, cut and checked."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone, translation

from actions.accounts.models import Preferences
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionType
from actions.permissions.models import SpendPermission
from actions.signing_page.facts import NAME_MAX, lookalike, outside_name
from actions.tests import test_enduser_pages as pages
from actions.tests.factories import make_action, make_permission
from actions.tests.test_enduser_pages import RECIPIENT, transfer, words
from core.chains import with_endpoints
from core.lifecycle import Actor, transition
from core.timezones import USER_ZONE_SESSION_KEY
from dev.local_server import LocalJsonServer

pytestmark = pytest.mark.django_db
# The end-user pages' fixtures: no chain, the user's wallet, the local price source.
offline, wallet, owner, price_server = pages.offline, pages.wallet, pages.owner, pages.price_server


# --- names from outside ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Picnic Support", "Picnic's name"),
        ("PICNIC", "Picnic's name"),
        ("P\u0456cn\u0456c Wallet", "Picnic's name"),  # Cyrillic і
        ("P1cn1c helper", "Picnic's name"),
        ("Shop\u202egnp.exe", "invisible characters"),  # right-to-left override
        ("Pay\u200bPal", "invisible characters"),  # zero-width space
        ("\u0410cme agent", "different alphabets"),  # Cyrillic А + Latin
    ],
)
def test_a_name_that_borrows_ours_or_hides_characters_is_untrusted(name, why):
    with translation.override("en"):
        assert why in outside_name(name).untrusted


@pytest.mark.parametrize("name", ["Claude", "Budget helper", "Açaí Compras", "Тестовый агент"])
def test_an_ordinary_name_in_one_alphabet_is_not_flagged(name):
    checked = outside_name(name)
    assert checked.untrusted == "" and checked.shown == name


def test_a_long_name_is_cut_and_control_characters_removed():
    checked = outside_name("A" * 200 + "\x07")
    assert len(checked.shown) == NAME_MAX and checked.shown.endswith("…")
    assert "\x07" not in checked.full


def test_a_lookalike_shares_the_first_and_last_four_characters():
    known = {"0x15d3" + "00" * 16 + "6a65", "0x" + "11" * 20}
    assert lookalike(RECIPIENT, known) is not None
    assert lookalike(RECIPIENT, {RECIPIENT.lower()}) is None  # the same address is not one
    assert lookalike("0x" + "22" * 20, known) is None


# --- who asks ------------------------------------------------------------------------------------


def test_the_page_says_which_agent_asks_since_when_and_flags_its_first_request(
    owner, user, application, make_token
):
    make_token(user, application)
    first = transfer(user, application)
    page = owner.get(f"/sign/{first.pk}/")
    shown, html = words(page), page.content.decode()
    assert "Asked by mcp-agent" in shown and "Connected since" in shown
    assert 'id="first-request"' in html
    assert f'<code id="client-id">{application.client_id}</code>' in html  # technical details
    assert html.index('id="client-id"') > html.index("Technical details")
    second = transfer(user, application)
    assert 'id="first-request"' not in owner.get(f"/sign/{second.pk}/").content.decode()


def test_a_revocation_the_user_asked_for_names_the_agent_but_not_as_asking(
    owner, user, application, wallet, make_token
):
    make_token(user, application)
    permission = make_permission(user=user, application=application, account=wallet)
    revoke = make_action(
        user=user,
        application=application,
        type=ActionType.SPEND_REVOKE,
        summary="Revoke the spending permission “groceries” (mcp-agent)",
        smart_account=wallet.address,
        params={"permission_ids": [permission.permission_id], "names": ["groceries"]},
    )
    SpendPermission.objects.filter(pk=permission.pk).update(revoke_action=revoke)
    page = owner.get(f"/sign/{revoke.pk}/")
    shown, html = words(page), page.content.decode()
    assert "Revoke the spending permission groceries" in shown
    assert "Asked by" not in shown and 'id="who-asks"' not in html
    assert '<dd id="permission-agents">mcp-agent</dd>' in html


def test_an_agent_connected_long_ago_is_not_flagged_new(owner, user, application, make_token):
    token = make_token(user, application)
    type(token).objects.filter(pk=token.pk).update(created=timezone.now() - timedelta(days=30))
    page = owner.get(f"/sign/{transfer(user, application).pk}/").content.decode()
    assert 'id="first-request"' not in page and 'id="connected-since"' in page


def test_an_agent_named_like_picnic_is_shown_as_untrusted_and_escaped(
    owner, user, make_application
):
    agent = make_application("Picnic Support <b>official</b>")
    html = owner.get(f"/sign/{transfer(user, agent).pk}/").content.decode()
    assert 'id="agent-untrusted"' in html and "not verified" in html
    assert "&lt;b&gt;official&lt;/b&gt;" in html and "<b>official</b>" not in html
    assert 'class="agent-name untrusted"' in html


# --- who receives ---------------------------------------------------------------------------------


def _executed_transfer(user, application, to: str) -> Action:
    action = transfer(user, application, to=to)
    for status in (ActionStatus.SIGNED, ActionStatus.SUBMITTED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=status, actor=Actor.worker())
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.EXECUTED,
        actor=Actor.worker(),
        updates={"tx_hash": "0x" + "ef" * 32, "block_number": 9},
    )
    return action


def test_a_first_time_recipient_is_warned_and_a_known_one_is_not(owner, user, application):
    html = owner.get(f"/sign/{transfer(user, application).pk}/").content.decode()
    assert 'id="first-time-recipient"' in html and 'id="lookalike"' not in html
    _executed_transfer(user, application, RECIPIENT)
    html = owner.get(f"/sign/{transfer(user, application).pk}/").content.decode()
    assert 'id="first-time-recipient"' not in html and 'id="lookalike"' not in html


def test_an_address_like_one_in_the_history_gets_the_strong_warning(owner, user, application):
    poisoned = "0x15d3" + "99" * 16 + "6A65"
    _executed_transfer(user, application, poisoned)
    page = owner.get(f"/sign/{transfer(user, application).pk}/")
    html = page.content.decode()
    assert 'id="lookalike"' in html and 'role="alert"' in html
    assert "looks like one you used before" in words(page)
    assert f'id="recipient-address">{RECIPIENT}</code>' in html  # the full address, always


def test_an_ens_name_is_escaped_cut_and_checked(owner, user, application):
    page = owner.get(
        f"/sign/{transfer(user, application, ens='picnic-support.eth').pk}/"
    ).content.decode()
    assert 'id="recipient-untrusted"' in page
    assert f'id="recipient-address">{RECIPIENT}</code>' in page


# --- what changes -----------------------------------------------------------------------------------


class BalanceNode(LocalJsonServer):
    """A JSON-RPC node answering every eth_call of a batch with one uint256."""

    def __init__(self, units: int) -> None:
        super().__init__()
        self.units = units

    def on_post(self, handler) -> None:
        calls = json.loads(self.read_body(handler))
        word = "0x" + f"{self.units:064x}"
        self.send_json(
            handler, 200, [{"jsonrpc": "2.0", "id": c["id"], "result": word} for c in calls]
        )


def test_the_balance_before_and_after_in_token_and_money(
    owner, user, application, settings, price_server
):
    with BalanceNode(units=2_000_000_000) as node:  # 2000 USDC (6 decimals)
        settings.CHAINS = with_endpoints(31337, rpc_url=node.url)
        shown = words(owner.get(f"/sign/{transfer(user, application).pk}/"))
    assert "Your balance 2,000 USDC ≈ $2,000.00 → 765.5 USDC ≈ $765.50" in shown


def test_a_balance_that_cannot_be_read_is_said_in_words(owner, user, application):
    shown = words(owner.get(f"/sign/{transfer(user, application).pk}/"))
    assert "Your balance could not be read right now; the amount above is exact" in shown


def test_a_missing_amount_is_said_in_words(owner, user, application):
    action = transfer(user, application, amount="")
    assert "You send amount unknown" in words(owner.get(f"/sign/{action.pk}/"))


# --- when ----------------------------------------------------------------------------------------


def test_the_browsers_time_zone_is_stored_with_the_user_and_used(owner, user, application):
    assert owner.post("/me/time-zone", {"time_zone": "Mars/Olympus"}).status_code == 400
    assert owner.post("/me/time-zone", {"time_zone": "America/Sao_Paulo"}).status_code == 204
    assert Preferences.objects.get(user=user).time_zone == "America/Sao_Paulo"
    page = owner.get(f"/sign/{transfer(user, application).pk}/")
    html = page.content.decode()
    assert 'data-time-zone="America/Sao_Paulo"' in html
    # the times are written in it, with its short name (the IANA name on hover only)
    assert "America/Sao_Paulo" not in words(page) and 'title="America/Sao_Paulo"' in html
    shown = words(page)  # English has no short name for it: its offset, never UTC itself
    assert "UTC\u221203:00" in shown and "UTC" not in shown.replace("UTC\u221203:00", "")


def test_the_stored_zone_comes_back_at_login(client, user):
    Preferences.objects.create(user=user, time_zone="America/Sao_Paulo")
    client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert client.session[USER_ZONE_SESSION_KEY] == "America/Sao_Paulo"


def test_the_time_zone_needs_a_signed_in_user_and_a_post(client, user):
    refused = client.post("/me/time-zone", {"time_zone": "Europe/Lisbon"})
    assert refused.status_code == 302 and refused["Location"].startswith("/accounts/login/")
    client.force_login(user)
    assert client.get("/me/time-zone").status_code == 405
    assert not Preferences.objects.exists()
