"""The activity list a person reads: each request in one line (what, how much, to whom, on
which network, who asked, when), what waits for the user's approval first with its deadline,
in the user's language, and as many queries for twelve rows as for two. No chain: the demo
tokens get made-up addresses (factories.make_offline_wallet), prices come from the local
CoinGecko-shaped server."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus, ActionType
from actions.tests.factories import (
    make_action,
    make_card_freeze,
    make_chain_unreachable,
    make_offline_wallet,
)
from actions.tests.test_enduser_pages import RECIPIENT, swap, transfer
from core.chains import chain_name
from core.lifecycle import Actor, transition
from core.templatetags.picnic_dates import utc_iso
from dev.providers.local_coingecko import LocalCoinGeckoServer

pytestmark = pytest.mark.django_db

NETWORK = chain_name(31337)  # "Gnosis (local)"


# The fixtures of test_enduser_pages.py: no chain, the local price server, an offline wallet.
@pytest.fixture(autouse=True)
def offline(settings):
    make_chain_unreachable(settings)
    settings.PRICE_CACHE_SECONDS = 0


@pytest.fixture
def price_server(settings):
    with LocalCoinGeckoServer() as server:
        settings.PRICE_API_URL = server.url
        yield server


@pytest.fixture
def wallet(user, monkeypatch):
    return make_offline_wallet(user, monkeypatch)


@pytest.fixture
def owner(client, user, wallet):
    client.force_login(user)
    return client


def rows(response) -> list[tuple[str, str, str]]:
    """The list's rows in page order: (action id, the row's HTML, its visible words)."""
    found = re.findall(r'<li data-action="([^"]+)">(.*?)</li>', response.content.decode(), re.S)
    inline = r"</?(bdi|code|strong|span|em|a|time)\b[^>]*>"  # no space of their own
    return [
        (pk, html, " ".join(unescape(re.sub(r"<[^>]+>", " ", re.sub(inline, "", html))).split()))
        for pk, html in found
    ]


def executed(action: Action, **updates) -> Action:
    """`action` signed, sent and mined."""
    for status in (ActionStatus.SIGNED, ActionStatus.SUBMITTED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=status, actor=Actor.system())
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.EXECUTED,
        actor=Actor.system(),
        updates={"tx_hash": "0x" + "ab" * 32, "block_number": 7, **updates},
    )
    return Action.objects.get(pk=action.pk)


def test_six_payments_to_different_people_are_six_rows_told_apart(
    owner, user, application, price_server
):
    paid = {}
    for n in range(1, 7):
        to = "0x" + f"{n:02x}" * 19 + "Aa"
        ens = "alice.eth" if n == 3 else ""
        action = transfer(user, application, to=to, amount=f"{n}0.5", ens=ens)
        paid[str(action.pk)] = (f"{n}0.5", Action.objects.get(pk=action.pk).params["to"], ens)
    listed = rows(owner.get("/", HTTP_ACCEPT_LANGUAGE="en"))
    assert len(listed) == 6
    assert len({words for _, _, words in listed}) == 6  # no two rows read the same
    for pk, html, words in listed:
        amount, to, ens = paid[pk]
        checksummed = re.search(r'class="address" title="(0x[0-9a-fA-F]{40})"', html)[1]
        assert checksummed.lower() == to.lower()
        short = f"{checksummed[:6]}…{checksummed[-4:]}"
        fiat = f"${amount}0"  # a dollar coin: $10.50, $20.50, …
        lead = f"Waiting for your approval Payment {amount} USDC ≈ {fiat} to "
        assert words.startswith(lead), words
        assert f"{short} on {NETWORK} · asked by {application.name}" in words
        if ens:
            assert f"to alice.eth {short} on" in words
        else:
            assert "alice.eth" not in words


def test_a_waiting_request_comes_first_with_its_deadline_then_the_rest_newest_first(
    owner, user, application
):
    now = timezone.now()
    waiting = transfer(user, application, amount="1")
    newer_done = executed(transfer(user, application, amount="2"))
    older_done = executed(transfer(user, application, amount="3"))
    Action.objects.filter(pk=waiting.pk).update(created_at=now - timedelta(hours=2))
    Action.objects.filter(pk=older_done.pk).update(created_at=now - timedelta(hours=3))
    Action.objects.filter(pk=newer_done.pk).update(created_at=now - timedelta(hours=1))
    listed = rows(owner.get("/", HTTP_ACCEPT_LANGUAGE="en"))
    assert [pk for pk, _, _ in listed] == [str(waiting.pk), str(newer_done.pk), str(older_done.pk)]
    (_, html, words), *rest = listed
    assert words.startswith("Waiting for your approval Payment 1 USDC to ")
    deadline = f'expires <time datetime="{utc_iso(waiting.expires_at)}" data-local'
    assert deadline in html
    assert rest[0][2].startswith("Done Payment 2 USDC to ")
    assert rest[1][2].startswith("Done Payment 3 USDC to ")
    assert all("expires" not in html for _, html, _ in rest)


def test_a_request_past_its_deadline_is_listed_expired_never_waiting(owner, user, application):
    late = transfer(user, application)
    Action.objects.filter(pk=late.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = owner.get("/", HTTP_ACCEPT_LANGUAGE="en")
    [(pk, html, words)] = rows(response)
    assert pk == str(late.pk) and words.startswith("Expired Payment 1,234.5 USDC to ")
    assert "expires" not in html and 'id="waiting"' not in response.content.decode()
    assert Action.objects.get(pk=late.pk).status == ActionStatus.EXPIRED


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (
            "pt-BR",
            [
                "Aguardando sua aprovação Pagamento 1.234,5 USDC ≈ R$ 6.542,85 para alice.eth "
                f"0x15d3…6A65 na rede {NETWORK} · pedido por",
                "expira em",
            ],
        ),
        (
            "es",
            [
                "Esperando tu aprobación Pago 1.234,5 USDC ≈ 1.135,74 € a alice.eth "
                f"0x15d3…6A65 en {NETWORK} · pedido por",
                "caduca el",
            ],
        ),
    ],
)
def test_a_row_reads_in_the_users_language(
    owner, user, application, price_server, accept, expected
):
    action = transfer(user, application, ens="alice.eth")
    [(pk, html, words)] = rows(owner.get("/", HTTP_ACCEPT_LANGUAGE=accept))
    assert pk == str(action.pk)
    for text in expected:
        assert text in words.replace("\xa0", " "), words
    assert f'title="{RECIPIENT}"' in html


def test_swaps_permissions_and_card_requests_say_what_they_carry(
    owner, user, application, wallet, price_server
):
    trade = swap(user, application)
    grant = make_action(
        user=user,
        application=application,
        type=ActionType.SPEND_GRANT,
        smart_account=wallet.address,
        params={"name": "mercado", "allowance": "50", "symbol": "USDC", "period": "weekly"},
    )
    revoke = make_action(
        user=user,
        application=application,
        type=ActionType.SPEND_REVOKE,
        smart_account=wallet.address,
        params={"names": ["mercado", "cinema"]},
    )
    freeze = make_card_freeze(user=user, application=application, params={"last4": "4242"})
    across = make_action(
        user=user,
        application=application,
        type=ActionType.SWAP,
        params=trade.params | {"cross_chain": True, "to_chain_id": 31338},
    )
    said = {pk: words for pk, _, words in rows(owner.get("/", HTTP_ACCEPT_LANGUAGE="pt-BR"))}
    assert f"Troca 2 USDC ≈ R$ 10,60 → EURe na rede {NETWORK}" in said[str(trade.pk)]
    assert (
        f"Permissão de gasto “mercado” até 50 USDC por semana na rede {NETWORK} · pedido por"
        in said[str(grant.pk)]
    )
    assert "“mercado”, “cinema” na rede" in said[str(revoke.pk)]
    assert "pedido por" not in said[str(revoke.pk)]  # the user revoked it: no agent asked
    assert f"•••• 4242 na rede {NETWORK}" in said[str(freeze.pk)]
    assert f"→ EURe da rede {NETWORK} para {chain_name(31338)} ·" in said[str(across.pk)]


def test_the_page_reads_as_many_queries_for_twelve_rows_as_for_two(
    owner, user, application, wallet, price_server
):
    def page():
        with CaptureQueriesContext(connection) as queries:
            response = owner.get("/", HTTP_ACCEPT_LANGUAGE="en")
        assert response.status_code == 200
        return response, len(queries)

    def add(n: int) -> None:
        transfer(user, application, amount=f"{n}", ens="alice.eth" if n % 2 else "")
        executed(swap(user, application))

    add(1)
    two, queries_for_two = page()
    asked = len(price_server.requests)
    for n in range(2, 7):
        add(n)
    twelve, queries_for_twelve = page()
    assert len(rows(two)) == 2 and len(rows(twelve)) == 12
    assert queries_for_twelve == queries_for_two
    assert len(price_server.requests) == 2 * asked  # one price request a page, not a row
    # And the rows say what they are: each amount with its fiat value.
    shown = [words for _, _, words in rows(twelve)]
    for n in range(1, 7):
        assert any(f"Payment {n} USDC ≈ ${n}.00 to " in w for w in shown), n
    assert sum("Swap 2 USDC ≈ $2.00 → EURe on" in w for w in shown) == 6
