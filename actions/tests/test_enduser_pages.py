"""The end-user pages in the user's language, in plain words: languages and the switcher,
locale formats, the signing page's facts (chain, fiat values, recipient, swap, fee), errors by
code in the user's language, reject with confirmation, passkey management. No chain: the demo
tokens get made-up addresses (factories.make_offline_wallet), prices come from the local
CoinGecko-shaped server."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from babel.messages.mofile import read_mo
from babel.messages.pofile import read_po
from django.conf import settings as django_settings
from django.utils import timezone

from actions.accounts.models import OwnerState, Passkey, SmartAccount, Token
from actions.accounts.passkeys import passkey_register, registration_options
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.permissions.models import SpendPermissionStatus
from actions.permissions.reasons import CODES, note_text, stored
from actions.permissions.spending import permission_for_transfer
from actions.signing_page.facts import _REASONS
from actions.tests.factories import (
    demo_asset_id,
    make_action,
    make_chain_unreachable,
    make_offline_wallet,
    make_permission,
    make_swap_action,
)
from chain.passkey_account import SoftwarePasskey
from core.chains import chain_name
from core.lifecycle import transition
from dev.providers.local_coingecko import LocalCoinGeckoServer

pytestmark = pytest.mark.django_db
RECIPIENT = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"


def words(response) -> str:
    """The visible text, whitespace collapsed (a no-break space too: "R$ 6.542,85")."""
    body = re.sub(r"</?(code|strong|span|em|a|time)\b[^>]*>", "", response.content.decode())
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", body)).split())


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


def usdc():
    return demo_asset_id(31337, "USDC")


def eure():
    return demo_asset_id(31337, "EURe")


def transfer(user, application, chain_id: int = 31337, **params) -> Action:
    return make_action(
        user=user,
        application=application,
        chain_id=chain_id,
        summary=f"Send 1234.5 USDC to {RECIPIENT} on Gnosis (local)",
        params={"asset_id": usdc(), "amount": "1234.5", "to": RECIPIENT, "symbol": "USDC"} | params,
    )


def swap(user, application) -> Action:
    return make_swap_action(
        user=user,
        application=application,
        summary="Swap 2 USDC for at least 1.81 EURe (quoted 1.84) via local on Gnosis (local), "
        "slippage 1.5%",
    )


# --- languages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "lang", "title"),
    [
        ("pt-BR,pt;q=0.9,en;q=0.5", "pt-br", "Entrar · Picnic"),
        ("es-ES,es;q=0.9", "es", "Iniciar sesión · Picnic"),
        ("en-GB,en;q=0.9", "en", "Sign in · Picnic"),
        ("", "en", "Sign in · Picnic"),
        ("de-DE,de;q=0.9", "en", "Sign in · Picnic"),  # not offered: English
    ],
)
def test_it_speaks_the_browsers_language(client, accept, lang, title):
    response = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE=accept)
    body = response.content.decode()
    assert f'<html lang="{lang}">' in body
    assert f"<title>{title}</title>" in body
    assert "/admin/" not in body and "back-office" not in body
    assert 'rel="icon"' in body


def test_the_switcher_remembers_the_choice_over_accept_language(client):
    response = client.post("/i18n/setlang/", {"language": "es", "next": "/accounts/login/"})
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert response.cookies[django_settings.LANGUAGE_COOKIE_NAME].value == "es"
    again = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="pt-BR")
    assert '<html lang="es">' in again.content.decode() and "Iniciar sesión" in words(again)


def test_the_back_office_stays_english(client):
    client.cookies[django_settings.LANGUAGE_COOKIE_NAME] = "pt-br"
    response = client.get("/admin/login/", HTTP_ACCEPT_LANGUAGE="pt-BR")
    assert '<html lang="en-us"' in response.content.decode()


def test_the_api_stays_in_the_seeds_english(client):
    response = client.get("/api/v1/profile", HTTP_ACCEPT_LANGUAGE="pt-BR")
    assert response.status_code == 401
    assert response.json()["detail"] == "Authentication credentials were not provided."


def test_the_committed_catalogues_are_compiled_from_their_po_files():
    """CI has no msgfmt: the .mo files are committed, and must say what the .po files say."""
    from pathlib import Path

    root = Path(django_settings.BASE_DIR) / "locale"
    for language in ("pt_BR", "es"):
        for domain in ("django", "djangojs"):
            po = read_po((root / language / "LC_MESSAGES" / f"{domain}.po").open("rb"))
            mo = read_mo((root / language / "LC_MESSAGES" / f"{domain}.mo").open("rb"))
            expected = {m.id: m.string for m in po if m.id and m.string and not m.fuzzy}
            compiled = {m.id: m.string for m in mo if m.id}
            assert compiled == expected, (language, domain)
            assert all(m.string for m in po if m.id), f"untranslated in {language}/{domain}"


def test_the_script_catalogue_is_in_the_page_language(client):
    body = client.get("/i18n/catalog.js", HTTP_ACCEPT_LANGUAGE="pt-BR").content.decode()
    assert "Nada foi assinado." in body


def test_the_accounts_list_names_each_chain_of_the_one_address(owner, wallet):
    # The passkey account has the same address on every chain: one row per chain, named.
    SmartAccount.objects.create(
        user=wallet.user,
        kind="picnic",
        chain_id=31338,
        address=wallet.address,
        owner=wallet.owner,
        passkey=wallet.passkey,
        entry_point_version="0.7",
    )
    page = owner.get("/passkeys/").content.decode().split('id="accounts"')[1]
    rows = [
        " ".join(unescape(re.sub(r"<[^>]+>", " ", r)).split())
        for r in re.findall(r"<li>(.*?)</li>", page)
    ]
    assert rows[:2] == [
        f"Picnic account {wallet.address} · {chain_name(31337)}",
        f"Picnic account {wallet.address} · {chain_name(31338)}",
    ]


def test_the_activity_names_spending_permission_requests_and_who_asked(
    owner, user, application, wallet
):
    grant = make_action(
        user=user, application=application, type="spendGrant", smart_account=wallet.address
    )
    revoke = make_action(
        user=user, application=application, type="spendRevoke", smart_account=wallet.address
    )
    page = owner.get("/activity/").content.decode()
    rows = {
        pk: " ".join(unescape(re.sub(r"<[^>]+>", " ", row)).split())
        for pk, row in re.findall(r'<li data-action="([^"]+)">(.*?)</li>', page, re.S)
    }
    assert rows[str(grant.pk)].startswith("Waiting for your approval Spending permission on ")
    assert f"asked by {application.name}" in rows[str(grant.pk)]
    # The user revoked it on their own page: no agent asked.
    assert rows[str(revoke.pk)].startswith("Waiting for your approval Revoke a spending permission")
    assert "asked by" not in rows[str(revoke.pk)]


def test_the_activity_counts_only_passkeys_that_can_approve_now(
    owner, user, application, wallet, django_assert_max_num_queries
):
    # The wallet's passkey is active; one more active, two removed, one being removed, one pending.
    for n, state in enumerate(
        [
            OwnerState.ACTIVE,
            OwnerState.REMOVED,
            OwnerState.REMOVED,
            OwnerState.REMOVING,
            OwnerState.PENDING,
        ],
        start=2,
    ):
        Passkey.objects.create(
            user=user,
            credential_id=f"cred-{n}",
            public_key=b"\x00",
            public_key_x="0x" + "11" * 32,
            public_key_y="0x" + "22" * 32,
            owner_state=state,
        )
    for _ in range(6):
        make_action(user=user, application=application, smart_account=wallet.address)
    with django_assert_max_num_queries(12):
        page = owner.get("/activity/", HTTP_ACCEPT_LANGUAGE="en")
    assert Passkey.objects.filter(user=user).count() == 6
    assert "Passkeys that can approve your payments: 2." in words(page)


def test_sign_out_is_a_post_from_the_header_and_lands_on_sign_in(owner):
    page = owner.get("/passkeys/").content.decode()
    assert re.search(r'<form method="post" action="/accounts/logout/"', page)
    response = owner.post("/accounts/logout/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/"
    assert owner.get("/passkeys/").status_code == 302  # signed out


def test_favicon_answers(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("picnic/favicon.svg")


# --- the signing page in plain words --------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (
            "pt-BR",
            ["Enviar 1.234,5 USDC para 0x15d3…6A65", "R$ 6.542,85", "Gnosis (local)"],
        ),
        ("es", ["Enviar 1.234,5 USDC a 0x15d3…6A65", "1.135,74 €", "Gnosis (local)"]),
        ("en", ["Send 1,234.5 USDC to 0x15d3…6A65", "$1,234.50", "Gnosis (local)"]),
    ],
)
def test_a_transfer_shows_amount_fiat_recipient_and_chain_per_language(
    owner, user, application, price_server, accept, expected
):
    action = transfer(user, application)
    response = owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE=accept)
    shown = words(response)
    for text in expected:
        assert text in shown, text
    assert f'id="recipient-address">{RECIPIENT}</code>' in response.content.decode()
    # The chain table's name and icon (core.chains), the same in every language.
    assert "picnic/chains/gnosis.svg" in response.content.decode()
    # The agent's summary is untouched: the API keeps the seed's English sentence.
    assert Action.objects.get(pk=action.pk).summary.startswith("Send 1234.5 USDC to 0x15d3")


def test_an_ens_recipient_leads_with_its_name_and_shows_the_address(owner, user, application):
    action = transfer(user, application, ens="alice.eth")
    response = owner.get(f"/sign/{action.pk}/")
    assert "Send 1,234.5 USDC to alice.eth" in words(response)
    assert f'id="recipient-address">{RECIPIENT}</code>' in response.content.decode()


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (
            "pt-BR",
            "A permissão de gasto do seu agente não cobre esta solicitação, por isso ela precisa "
            "da sua assinatura: a permissão de gasto “coffee” foi revogada.",
        ),
        (
            "es",
            "El permiso de gasto de tu agente no cubre esta solicitud, por eso necesita tu "
            "firma: el permiso de gasto “coffee” fue revocado.",
        ),
        (
            "en",
            "Your agent's spending permission does not cover this request, so it needs your "
            "signature: the spending permission “coffee” was revoked.",
        ),
    ],
)
def test_a_payment_a_revoked_permission_no_longer_covers_says_why_in_the_users_language(
    owner, user, application, wallet, accept, expected
):
    make_permission(
        user=user,
        application=application,
        account=wallet,
        status=SpendPermissionStatus.REVOKED,
        name="coffee",
        session_key_encrypted="",
    )
    _, why = permission_for_transfer(
        user=user,
        application=application,
        token=Token.objects.get(symbol="USDC", chain_id=31337),
        recipient=RECIPIENT,
        recipient_shown=RECIPIENT,
        units=1,
    )
    action = transfer(
        user, application, permission_note=note_text(why), permission_reasons=stored(why)
    )
    response = owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE=accept)
    assert expected in words(response)
    assert 'id="permission-note"' in response.content.decode()
    # The agent's words stay the tool's English ones.
    assert action.params["permission_note"] == "the permission “coffee” was revoked"


def test_every_reason_is_said_with_the_users_numbers_and_an_unknown_one_in_english(
    owner, user, application
):
    over_and_elsewhere = transfer(
        user,
        application,
        permission_note="over this week's remaining 1234.5 USDC; landlord.eth is not in the "
        "permission's recipients",
        permission_reasons=[
            {
                "code": "over_allowance",
                "name": "coffee",
                "period": "weekly",
                "amount": "1234.5",
                "symbol": "USDC",
            },
            {"code": "recipient", "name": "rent", "recipient": "landlord.eth"},
        ],
    )
    shown = words(owner.get(f"/sign/{over_and_elsewhere.pk}/", HTTP_ACCEPT_LANGUAGE="pt-BR"))
    assert (
        "por isso ela precisa da sua assinatura: é mais do que os 1.234,5 USDC que restam nesta "
        "semana da permissão de gasto “coffee”; landlord.eth não é um dos destinatários da "
        "permissão de gasto “rent”."
    ) in shown
    # Every code the tool stores has its sentence here.
    for code in CODES - {"over_allowance"}:
        assert code in _REASONS, code
    # A code this page does not know (kept by a later version): the agent's note, as it is.
    later = transfer(
        user,
        application,
        permission_note="a reason from later",
        permission_reasons=[{"code": "from_later"}],
    )
    shown = words(owner.get(f"/sign/{later.pk}/", HTTP_ACCEPT_LANGUAGE="es"))
    assert "por eso necesita tu firma: a reason from later." in shown
    # No permission involved: nothing said.
    plain = owner.get(f"/sign/{transfer(user, application).pk}/").content.decode()
    assert 'id="permission-note"' not in plain


def test_a_transfer_to_ones_own_account_says_so(owner, user, application, wallet):
    action = transfer(user, application, to=wallet.address)
    assert "one of your own accounts" in words(owner.get(f"/sign/{action.pk}/"))


@pytest.mark.parametrize(
    ("chain_id", "fee"),
    [(31338, "at most ≈ $2.10 (0.0007 ETH)"), (31337, "less than $0.01 (0.0007 xDAI)")],
)
def test_the_network_fee_is_the_most_the_operation_can_cost(
    owner, user, application, price_server, chain_id, fee
):
    # gas 350 000 × 2 gwei = 0.0007 of the chain's native coin (core.chains: ETH on the L2,
    # xDAI on the card's chain), valued at that coin's price: the money first.
    action = transfer(user, application, chain_id=chain_id)
    shown = words(owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="en"))
    assert f"Network fee {fee}" in shown


def test_a_sponsored_fee_says_picnic_pays(owner, user, application, price_server):
    from actions.tests.factories import user_op

    action = make_action(
        user=user,
        application=application,
        params={"asset_id": usdc(), "amount": "1", "to": RECIPIENT, "symbol": "USDC"},
        user_op=user_op(paymaster="0x" + "77" * 20),
    )
    assert "Network fee Paid by Picnic" in words(owner.get(f"/sign/{action.pk}/"))


@pytest.mark.parametrize(
    ("lang", "said"),
    [
        ("en", "Includes a one-time fee to set up your account on"),
        ("pt-BR", "Inclui uma taxa única para configurar sua conta na rede"),
    ],
)
def test_a_first_op_on_a_chain_says_its_fee_sets_up_the_account(
    owner, user, application, price_server, lang, said
):
    from actions.tests.factories import user_op

    params = {"asset_id": usdc(), "amount": "1", "to": RECIPIENT, "symbol": "USDC"}
    first = make_action(
        user=user,
        application=application,
        params=params,
        user_op=user_op(factory="0x" + "fa" * 20, factoryData="0x1234"),
    )
    later = make_action(user=user, application=application, params=params, user_op=user_op())
    assert said in words(owner.get(f"/sign/{first.pk}/", HTTP_ACCEPT_LANGUAGE=lang))
    assert said not in words(owner.get(f"/sign/{later.pk}/", HTTP_ACCEPT_LANGUAGE=lang))


def test_a_price_source_that_fails_says_price_unavailable(owner, user, application, settings):
    with LocalCoinGeckoServer(mode="error") as server:
        settings.PRICE_API_URL = server.url
        response = owner.get(
            f"/sign/{transfer(user, application).pk}/", HTTP_ACCEPT_LANGUAGE="pt-BR"
        )
    shown = words(response)
    assert "1.234,5 USDC (preço indisponível)" in shown
    assert "Os preços estão indisponíveis agora" in shown
    # No made-up fiat and not the provider's status (a word: the page's ids are hex).
    assert "R$" not in shown and not re.search(r"\b500\b", shown)


def test_a_swap_says_you_pay_you_receive_at_least_and_quoted(
    owner, user, application, price_server
):
    response = owner.get(f"/sign/{swap(user, application).pk}/", HTTP_ACCEPT_LANGUAGE="es")
    shown = words(response)
    assert "Pagas 2 USDC ≈ 1,84" in shown
    assert "Recibes como mínimo 1,81 EURe ≈ 1,81" in shown
    assert "Cotizado 1,84 EURe" in shown
    assert (
        "Tolerancia de deslizamiento 1,5 %" in shown or "Tolerancia de deslizamiento 1,5%" in shown
    )
    assert 'id="slippage-warning"' in response.content.decode()


def test_card_actions_say_what_happens_in_their_own_words(owner, user, application):
    freeze = make_action(
        user=user,
        application=application,
        type="cardFreeze",
        user_op=None,
        params={"card_id": "card-1", "last4": "4242", "siwe_message": "m", "challenge": "0x00"},
    )
    shown = words(owner.get(f"/sign/{freeze.pk}/", HTTP_ACCEPT_LANGUAGE="pt-BR"))
    assert "Bloquear seu cartão Picnic •••• 4242" in shown
    assert "Pagamentos com este cartão são recusados até você desbloqueá-lo" in shown
    limit = make_action(
        user=user,
        application=application,
        type="cardLimitSet",
        user_op=None,
        params={
            "card_id": "card-1",
            "last4": "4242",
            "daily_limit": "1500",
            "symbol": "EURe",
            "asset_id": eure(),
            "delay": "0x" + "01" * 20,
            "challenge": "0x00",
        },
    )
    shown = words(owner.get(f"/sign/{limit.pk}/", HTTP_ACCEPT_LANGUAGE="es"))
    assert "Nuevo límite diario de tu tarjeta Picnic •••• 4242: 1.500 EURe" in shown
    assert "Unos 3 minutos después de firmar" in shown


def test_a_failure_is_explained_in_the_users_language_with_what_to_do_next(
    owner, user, application
):
    from core.lifecycle import Actor

    action = transfer(user, application)
    for step in (ActionStatus.SIGNED, ActionStatus.SUBMITTED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=action.pk, to=step, actor=Actor.system())
    error = "bundler rejected (-32500): AA21 didn't pay prefund"
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=action.pk,
        to=ActionStatus.FAILED,
        actor=Actor.system(),
        updates={"error": error},
    )
    shown = words(owner.get(f"/sign/{action.pk}/", HTTP_ACCEPT_LANGUAGE="pt-BR"))
    assert (
        "Não foi possível concluir a transferência: a rede a recusou antes de chegar à "
        "blockchain (sua conta não tem ETH suficiente para pagar a taxa de rede)."
    ) in shown
    assert "E agora: se ainda quiser, peça ao seu assistente para propor de novo" in shown
    assert str(action.pk) in shown  # the reference support asks for


# --- reject, with confirmation, without JavaScript ------------------------------------------


def test_reject_asks_first_then_rejects_with_a_plain_form(owner, user, application):
    action = transfer(user, application)
    page = owner.get(f"/sign/{action.pk}/").content.decode()
    assert re.search(r'<form id="reject-confirm"[^>]*\shidden', page)  # closed until asked
    asked = owner.get(f"/sign/{action.pk}/reject")
    assert asked.status_code == 302 and asked["Location"].endswith("?reject=confirm#reject-confirm")
    confirm = owner.get(asked["Location"]).content.decode()
    assert not re.search(r'<form id="reject-confirm"[^>]*\shidden', confirm)
    assert (
        Action.objects.get(pk=action.pk).status == ActionStatus.PROPOSED
    )  # asking changed nothing
    done = owner.post(f"/sign/{action.pk}/reject")
    assert done.status_code == 302 and done["Location"] == f"/sign/{action.pk}/"
    assert Action.objects.get(pk=action.pk).status == ActionStatus.REJECTED
    assert Action.objects.get(pk=action.pk).history.filter(status="rejected").count() == 1
    shown = words(owner.get(done["Location"], HTTP_ACCEPT_LANGUAGE="es"))
    assert "Rechazaste esta solicitud. No se envió nada." in shown


def test_rejecting_twice_from_the_script_answers_in_the_users_language(owner, user, application):
    action = transfer(user, application)
    first = owner.post(f"/sign/{action.pk}/reject", HTTP_ACCEPT="application/json")
    assert first.json() == {"status": "rejected"}
    again = owner.post(
        f"/sign/{action.pk}/reject", HTTP_ACCEPT="application/json", HTTP_ACCEPT_LANGUAGE="es"
    )
    assert again.status_code == 409
    assert again.json()["code"] == "not_proposed"
    assert again.json()["error"].startswith("Esta solicitud ya no se puede firmar ni rechazar")


# --- errors by code, never library text -----------------------------------------------------


@pytest.fixture
def software_passkey(user, settings):
    settings.WEBAUTHN_RP_ID = "localhost"
    settings.WEBAUTHN_ORIGIN = "http://localhost:8000"
    passkey = SoftwarePasskey(rp_id="localhost", origin="http://localhost:8000")
    _, challenge = registration_options(user=user)
    stored = passkey_register(
        user=user,
        credential_json=json.dumps(passkey.create(challenge)),
        expected_challenge=challenge,
        account_address=lambda qx, qy: ("0x" + "ab" * 20, "0x" + "cd" * 20),
    )
    return passkey, stored


def approve(client, action, passkey, *, language: str):
    """The signing page's approve request with the passkey's assertion, in `language`."""
    assertion = passkey.get_json(bytes.fromhex(action.user_op_hash[2:]))
    return client.post(
        f"/sign/{action.pk}/approve",
        json.dumps(assertion),
        content_type="application/json",
        HTTP_ACCEPT_LANGUAGE=language,
    )


def test_a_sign_count_refusal_is_explained_not_quoted(client, user, application, software_passkey):
    passkey, stored = software_passkey
    client.force_login(user)
    action = make_action(user=user, application=application, smart_account="0x" + "ab" * 20)
    Passkey.objects.filter(pk=stored.pk).update(sign_count=passkey.sign_count + 10)
    response = approve(client, action, passkey, language="pt-BR")
    body = response.json()
    assert response.status_code == 409 and body["code"] == "sign_count"
    assert body["error"].startswith("O contador de segurança da sua chave de acesso não avançou")
    assert "sign count" not in body["error"]
    assert "sign count" in body["detail"]  # the API's detail keeps the reason for support
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PROPOSED


def test_an_unverified_user_is_explained_in_spanish(client, user, application, software_passkey):
    passkey, _stored = software_passkey
    client.force_login(user)
    action = make_action(user=user, application=application, smart_account="0x" + "ab" * 20)
    passkey.user_verified = False  # touched the key, but no fingerprint, face or PIN
    response = approve(client, action, passkey, language="es")
    body = response.json()
    assert response.status_code == 409 and body["code"] == "user_verification"
    assert body["error"].startswith("Tu dispositivo no confirmó que eres tú")
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PROPOSED


def test_registration_offers_es256_and_rs256(client, user):
    client.force_login(user)
    options = client.post("/passkeys/register/options").json()
    assert [p["alg"] for p in options["pubKeyCredParams"]] == [-7, -257]


# --- passkey management ---------------------------------------------------------------------


def test_the_passkeys_page_lists_name_created_last_used_and_hides_the_demo_account(
    owner, user, wallet
):
    SmartAccount.objects.create(
        user=user, kind="picnic", chain_id=31337, address="0x" + "ee" * 20, owner="eoa:0x1"
    )
    Passkey.objects.filter(user=user).update(
        name="Phone", last_used_at=timezone.now() - timezone.timedelta(hours=3)
    )
    response = owner.get("/passkeys/", HTTP_ACCEPT_LANGUAGE="es")
    shown = words(response)
    assert "Phone" in shown and "Creada" in shown and "hace 3 horas" in shown
    assert wallet.address in shown and "0x" + "ee" * 20 not in shown
    assert 'id="logout"' in response.content.decode()
    assert "<title>Tus llaves de acceso · Picnic</title>" in response.content.decode()


def test_a_passkey_is_renamed(owner, user, wallet):
    passkey = Passkey.objects.get(user=user)
    response = owner.post(f"/passkeys/{passkey.pk}/rename", {"name": "  Laptop  "})
    assert response.status_code == 302
    assert Passkey.objects.get(pk=passkey.pk).name == "Laptop"
    assert "Passkey renamed." in words(owner.get("/passkeys/"))


def test_the_passkey_that_owns_the_account_is_never_removed(owner, user, wallet):
    passkey = Passkey.objects.get(user=user)
    page = owner.get(f"/passkeys/{passkey.pk}/remove")
    assert page.status_code == 200  # the confirmation
    owner.post(f"/passkeys/{passkey.pk}/remove", HTTP_ACCEPT_LANGUAGE="pt-BR")
    assert Passkey.objects.filter(pk=passkey.pk).exists()
    # The only owner of the account on chain: removing it would leave nobody to sign.
    assert "Esta é a única chave de acesso que assina pela sua conta" in words(
        owner.get("/passkeys/", HTTP_ACCEPT_LANGUAGE="pt-BR")
    )


def test_a_second_device_is_removed_unless_it_is_the_last_while_actions_wait(
    owner, user, wallet, application
):
    owning = Passkey.objects.get(user=user)
    second = Passkey.objects.create(  # registered, never approved: not an owner on chain
        user=user,
        credential_id="cred-2",
        public_key=b"\x00",
        public_key_x="0x",
        public_key_y="0x",
        owner_state="pending",
    )
    owner.post(f"/passkeys/{second.pk}/remove")
    assert not Passkey.objects.filter(pk=second.pk).exists()
    # The last passkey (not owning an account here) with an action waiting: kept.
    SmartAccount.objects.filter(passkey=owning).update(passkey=None)
    transfer(user, application)
    owner.post(f"/passkeys/{owning.pk}/remove")
    assert Passkey.objects.filter(pk=owning.pk).exists()
    assert "request is waiting for your signature" in words(owner.get("/passkeys/"))


def test_someone_elses_passkey_is_not_found(client, other_user, user, wallet):
    client.force_login(other_user)
    passkey = Passkey.objects.get(user=user)
    client.post(f"/passkeys/{passkey.pk}/rename", {"name": "mine"})
    client.post(f"/passkeys/{passkey.pk}/remove")
    assert Passkey.objects.get(pk=passkey.pk).name == ""


@pytest.mark.parametrize(("lang", "active"), [("pt-BR", "Ativa"), ("en", "Active")])
def test_permission_statuses_are_said_in_the_page_language(
    owner, user, application, wallet, lang, active
):
    on = make_permission(user=user, application=application, account=wallet)
    page = owner.get("/permissions/", HTTP_ACCEPT_LANGUAGE=lang).content.decode()
    status = dict(
        re.findall(r'id="permission-([^"]+)".*?<dd class="status">([^<]*)</dd>', page, re.S)
    )
    assert status[str(on.pk)] == active
