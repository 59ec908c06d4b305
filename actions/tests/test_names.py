"""Chains by name with explorer links (core.chains) and times to the second in the viewer's
zone, on every page a person reads: the staff timeline, the console, the admin, the signing
page. The local chains have no explorer by default; these tests give one a template."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from eth_utils import to_checksum_address

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.tests.factories import make_action, make_offline_wallet
from core.lifecycle import Actor, transition

pytestmark = pytest.mark.django_db

S = ActionStatus
TX = "0x" + "cd" * 32
ACCOUNT = "0x" + "7a" * 20
EXPLORER = "https://explorer.example/{kind}/{value}"
# A raw isoformat's fraction of a second: "11:29:06.498435".
MICROSECONDS = re.compile(r"\d\d:\d\d:\d\d\.\d{3,6}")


@pytest.fixture
def with_explorer(settings):
    """The card's chain (31337) with an explorer; the L2 (31338) without one."""
    first, *rest = settings.CHAINS
    settings.CHAINS = (dataclasses.replace(first, explorer_url=EXPLORER), *rest)
    return settings.CHAINS[0]


def failed_action(user, application, *, chain_id: int = 31337) -> Action:
    """Failed a minute ago, with a transaction: listed by the console ("failed in the last
    hour"), with every timestamp set and a history of four rows."""
    action = make_action(
        user=user, application=application, chain_id=chain_id, smart_account=ACCOUNT
    )
    for step in (S.SIGNED, S.SUBMITTED, S.BROADCAST, S.FAILED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    Action.objects.filter(pk=action.pk).update(tx_hash=TX, block_number=42, error="reverted")
    action.refresh_from_db()
    return action


def explorer_links(html: str) -> list[str]:
    return re.findall(r'href="(https://explorer\.example/[^"]+)"', html)


# --- chain names and explorer links ---------------------------------------------------------


def test_the_staff_timeline_names_the_chain_and_links_the_explorer(
    staff_client, user, application, with_explorer
):
    action = failed_action(user, application)
    html = staff_client.get(f"/staff/actions/{action.pk}/").text
    assert 'title="chain id 31337 (eip155:31337)">Gnosis (local)</span>' in html
    assert set(explorer_links(html)) == {
        f"https://explorer.example/address/{ACCOUNT}",
        f"https://explorer.example/address/{action.params['to']}",  # the transfer's recipient
        f"https://explorer.example/tx/{TX}",
        "https://explorer.example/block/42",
    }


def test_a_chain_without_an_explorer_gets_its_name_and_no_link(staff_client, user, application):
    action = failed_action(user, application, chain_id=31338)
    html = staff_client.get(f"/staff/actions/{action.pk}/").text
    assert ">Base (local)</span>" in html
    assert f'<code title="{TX}">{TX}</code>' in html
    assert 'class="explorer"' not in html


def test_a_chain_not_in_the_table_still_reads_as_words(staff_client, owner, user, application):
    action = failed_action(user, application, chain_id=5)
    assert ">chain 5</span>" in staff_client.get(f"/staff/actions/{action.pk}/").text
    page = owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Network 5" in page and "picnic/chains/generic.svg" in page


def test_console_rows_name_the_chain_and_link_the_transaction(
    staff_client, user, application, with_explorer
):
    linked = failed_action(user, application)
    plain = failed_action(user, application, chain_id=31338)
    for page in (
        staff_client.get("/staff/").text,
        staff_client.get("/staff/search/", {"q": "alice"}).text,
    ):
        row = _row(page, linked.pk)
        assert "on <span" in row and ">Gnosis (local)</span>" in row
        assert explorer_links(row) == [f"https://explorer.example/tx/{TX}"]
        row = _row(page, plain.pk)
        assert ">Base (local)</span>" in row and explorer_links(row) == []


def _row(page: str, pk) -> str:
    return re.search(rf'<tr data-key="action:{pk}".*?</tr>', page, re.S)[0]


def test_the_admin_changelist_reads_chains_by_name_with_the_id_on_hover(
    staff_client, user, application, with_explorer
):
    linked = failed_action(user, application)
    plain = failed_action(user, application, chain_id=31338)
    html = staff_client.get("/admin/actions/action/").text
    assert 'title="chain id 31337 (eip155:31337)">Gnosis (local)</span>' in html
    assert 'title="chain id 31338 (eip155:31338)">Base (local)</span>' in html
    # The account cell links to the explorer where the chain has one: once, for `linked`.
    assert explorer_links(html) == [f"https://explorer.example/address/{ACCOUNT}"]
    # The filter lists the chains by name and filters by id.
    assert ">Gnosis (local)</a>" in html and ">Base (local)</a>" in html
    only_l2 = staff_client.get("/admin/actions/action/", {"chain_id": "31338"}).text
    assert str(plain.pk)[:8] in only_l2 and str(linked.pk)[:8] not in only_l2


def test_the_admin_change_page_names_the_chain_and_links_the_explorer(
    staff_client, user, application, with_explorer
):
    linked = failed_action(user, application)
    plain = failed_action(user, application, chain_id=31338)
    html = staff_client.get(f"/admin/actions/action/{linked.pk}/change/").text
    assert ">Gnosis (local)</span>" in html
    assert {
        f"https://explorer.example/address/{ACCOUNT}",
        f"https://explorer.example/tx/{TX}",
        "https://explorer.example/block/42",
    } <= set(explorer_links(html))
    html = staff_client.get(f"/admin/actions/action/{plain.pk}/change/").text
    assert "none: Base (local) has no explorer in the chain table" in html
    assert explorer_links(html) == []


@pytest.fixture
def owner(user, monkeypatch):
    """The action's user, in a browser of their own (staff_client is another)."""
    make_offline_wallet(user, monkeypatch)
    browser = Client()
    browser.force_login(user)
    return browser


def test_the_signing_page_names_the_chain_and_links_the_explorer(
    owner, user, application, with_explorer
):
    action = failed_action(user, application)
    Action.objects.filter(pk=action.pk).update(status=S.EXECUTED, error="")
    page = owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Gnosis (local)" in page and "picnic/chains/gnosis.svg" in page
    assert set(explorer_links(page)) == {
        f"https://explorer.example/tx/{TX}",
        f"https://explorer.example/address/{to_checksum_address(ACCOUNT)}",
    }
    # The same action on a chain without an explorer: the name, no link.
    Action.objects.filter(pk=action.pk).update(chain_id=31338)
    page = owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Base (local)" in page and "picnic/chains/base.svg" in page
    assert explorer_links(page) == []


# --- times ----------------------------------------------------------------------------------


def test_no_page_shows_a_microsecond_timestamp(
    staff_client, owner, user, application, with_explorer
):
    action = failed_action(user, application)
    # Every timestamp with a fraction of a second, the way the database keeps them.
    moment = datetime(2026, 12, 4, 11, 29, 6, 498435, tzinfo=UTC)
    Action.objects.filter(pk=action.pk).update(
        created_at=moment,
        signed_at=moment,
        broadcast_at=moment,
        executed_at=moment,
        next_submit_at=moment,
        last_reconciled_at=moment,
        expires_at=moment + timedelta(minutes=15),
    )
    failed_action(user, application, chain_id=31338)  # two found: the search lists, not redirects
    # (The history is append-only: its rows keep the fractions of now, which is as good.)
    pages = {
        "timeline": staff_client.get(f"/staff/actions/{action.pk}/"),
        "console home": staff_client.get("/staff/"),
        "search": staff_client.get("/staff/search/", {"q": "alice"}),
        "admin changelist": staff_client.get("/admin/actions/action/"),
        "admin change page": staff_client.get(f"/admin/actions/action/{action.pk}/change/"),
        "resolve page": staff_client.get(
            "/admin/actions/action/resolve/resend/", {"ids": str(action.pk)}
        ),
        "signing page": owner.get(f"/sign/{action.pk}/"),
    }
    for name, response in pages.items():
        assert response.status_code == 200, name
        html = response.content.decode()
        assert not MICROSECONDS.findall(html), (name, MICROSECONDS.findall(html)[:3])
    timeline = pages["timeline"].text
    assert (
        '<time datetime="2026-12-04T11:29:06Z" title="2026-12-04T11:29:06+00:00 (UTC)">'
        "2026-12-04 11:29:06 UTC</time>"
    ) in timeline
    # End users: the UTC value in <time datetime>, the page's zone on hover; rewritten in the
    # browser's zone by a script when it differs.
    signing = pages["signing page"].content.decode()
    assert '<time datetime="2026-12-04T11:29:06Z" data-local title="UTC">' in signing
    assert "picnic/local_time.js" in signing


def test_staff_pages_show_times_in_the_staff_members_zone(staff_client, user, application):
    action = failed_action(user, application)
    moment = datetime(2026, 12, 4, 11, 29, 6, 498435, tzinfo=UTC)
    Action.objects.filter(pk=action.pk).update(created_at=moment)
    staff_client.cookies["picnic_timezone"] = "America/Sao_Paulo"
    timeline = staff_client.get(f"/staff/actions/{action.pk}/").text
    shown = (
        '<time datetime="2026-12-04T11:29:06Z" title="2026-12-04T08:29:06-03:00 '
        '(America/Sao_Paulo)">2026-12-04 08:29:06 -03</time>'
    )
    assert f"<dt>Created</dt><dd>{shown}</dd>" in timeline
    # Every time on it (the history's rows too) is shown at -03.
    times = re.findall(
        r'<time datetime="[^"]+" title="[^"]+-03:00 \(America/Sao_Paulo\)">', timeline
    )
    assert len(times) == timeline.count("<time ") > action.history.count()
    # The console's ages carry the same zone on hover, and its "as of" clock too.
    console = staff_client.get("/staff/").text
    assert "created 2026-12-04 08:29:06 -03" in _row(console, action.pk)
    assert " UTC" not in re.sub(r"<svg.*?</svg>", "", console, flags=re.S)
    # The admin's change page, read-only fields included.
    change = staff_client.get(f"/admin/actions/action/{action.pk}/change/").text
    assert "2026-12-04 08:29:06 -03" in change


def test_tokens_and_accounts_read_their_chain_by_name_in_the_admin():
    from actions.accounts.models import SmartAccount, Token

    assert str(Token(symbol="USDC", chain_id=31338)) == "USDC on Base (local)"
    account = SmartAccount(kind="picnic", address=ACCOUNT, chain_id=31337)
    assert str(account) == f"picnic {ACCOUNT} on Gnosis (local)"
