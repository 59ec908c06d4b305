"""get_profile: ramps keyed by currency with each provider's KYC word normalised by the written
table (every value, through the real HTTP adapters against local Monerium/Avenia servers), a
provider that fails keeps the last status and says why, cards, scopes and other users."""

from __future__ import annotations

import pytest

from actions.card.models import Card
from actions.providers.ramps import AVENIA_KYC, MONERIUM_KYC
from actions.ramps.models import RAMP_PROVIDER_FOR, KycStatus, RampAccount, RampCurrency
from dev.providers.local_ramps import LocalAveniaServer, LocalMoneriumServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def ramps(settings):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with LocalMoneriumServer() as monerium, LocalAveniaServer() as avenia:
        settings.MONERIUM_URL = monerium.url
        settings.AVENIA_URL = avenia.url
        settings.RAMP_TIMEOUT_SECONDS = 0.5
        yield monerium, avenia


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application, scope="read:profile")


def link(user, currency: RampCurrency, external_id: str) -> RampAccount:
    return RampAccount.objects.create(
        user=user, currency=currency, provider=RAMP_PROVIDER_FOR[currency], external_id=external_id
    )


def profile(api_client, token) -> dict:
    response = api_client.get("/api/v1/profile", token)
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize(("state", "expected"), sorted(MONERIUM_KYC.items()))
def test_every_monerium_profile_state_is_normalised(
    ramps, user, api_client, token, state, expected
):
    monerium, _ = ramps
    monerium.profiles["p-1"] = state
    link(user, RampCurrency.EUR, "p-1")
    kyc = profile(api_client, token)["ramps"]["EUR"]["kyc"]
    assert kyc["status"] == expected and kyc["providerStatus"] == state and kyc["error"] is None
    ramp = RampAccount.objects.get(user=user)
    assert (ramp.kyc_status, ramp.provider_status) == (expected, state)
    assert ramp.kyc_checked_at is not None


@pytest.mark.parametrize(("word", "expected"), sorted(AVENIA_KYC.items()))
def test_every_avenia_kyc_attempt_outcome_is_normalised(
    ramps, user, api_client, token, word, expected
):
    _, avenia = ramps
    avenia.attempts["sub-1"] = []  # "" is exactly this: no attempt at all
    if word:
        avenia.add_attempt("sub-1", "COMPLETED", "REJECTED")  # older: the newest decides
        status, _, result = word.partition(":")
        avenia.add_attempt("sub-1", status, result)
    link(user, RampCurrency.BRL, "sub-1")
    kyc = profile(api_client, token)["ramps"]["BRL"]["kyc"]
    assert kyc["status"] == expected and kyc["providerStatus"] == (word or None)
    assert RampAccount.objects.get(user=user).kyc_status == expected


def test_the_tables_cover_exactly_the_normalised_vocabulary():
    for table in (MONERIUM_KYC, AVENIA_KYC):
        assert set(table.values()) == set(KycStatus)


def test_profile_has_the_user_both_currencies_and_the_cards(ramps, user, api_client, token):
    monerium, _ = ramps
    monerium.profiles["p-1"] = "approved"
    link(user, RampCurrency.EUR, "p-1")
    physical = Card.objects.create(
        user=user, card_id="c-phys", last4="4242", safe_address="0x" + "11" * 20, chain_id=31337
    )
    Card.objects.create(
        user=user,
        card_id="c-virt",
        last4="0007",
        safe_address="",
        chain_id=31337,
        is_virtual=True,
        physical=physical,
    )
    body = profile(api_client, token)
    assert body["userId"] == str(user.pk) and body["email"] == user.email
    assert body["ramps"]["EUR"] == {
        "provider": "monerium",
        "providerName": "Monerium",
        "accountId": "p-1",
        "kyc": {
            "status": "approved",
            "providerStatus": "approved",
            "checkedAt": body["ramps"]["EUR"]["kyc"]["checkedAt"],
            "error": None,
        },
    }
    # No Avenia account: BRL is there, at its provider, with no KYC.
    assert body["ramps"]["BRL"] == {
        "provider": "avenia",
        "providerName": "BRLA / Avenia",
        "accountId": None,
        "kyc": {"status": "none", "providerStatus": None, "checkedAt": None, "error": None},
    }
    assert [(c["cardId"], c["virtual"], c["physicalCardId"]) for c in body["cards"]] == [
        ("c-phys", False, None),
        ("c-virt", True, "c-phys"),
    ]
    assert body["cards"][1]["safeAddress"] == physical.safe_address  # inherits the account
    import jsonschema

    from actions.contract import PROFILE_SCHEMA

    jsonschema.validate(body, PROFILE_SCHEMA)


@pytest.mark.parametrize("mode", ["error", "hang", "drop", "garbage"])
def test_a_provider_that_fails_keeps_the_last_status_and_says_why(
    ramps, user, api_client, token, mode
):
    monerium, _ = ramps
    monerium.profiles["p-1"] = "approved"
    link(user, RampCurrency.EUR, "p-1")
    first = profile(api_client, token)["ramps"]["EUR"]["kyc"]
    monerium.mode = mode
    kyc = profile(api_client, token)["ramps"]["EUR"]["kyc"]
    assert kyc["status"] == "approved" and kyc["checkedAt"] == first["checkedAt"]
    assert kyc["error"].startswith("Monerium")
    monerium.mode = "ok"
    assert profile(api_client, token)["ramps"]["EUR"]["kyc"]["error"] is None


def test_a_status_without_a_mapping_is_reported_not_guessed(ramps, user, api_client, token):
    _, avenia = ramps
    avenia.attempts["sub-1"] = []
    avenia.add_attempt("sub-1", "COMPLETED", "APPROVED")
    link(user, RampCurrency.BRL, "sub-1")
    assert profile(api_client, token)["ramps"]["BRL"]["kyc"]["status"] == "approved"
    avenia.add_attempt("sub-1", "ON-HOLD")
    kyc = profile(api_client, token)["ramps"]["BRL"]["kyc"]
    assert kyc["status"] == "approved" and kyc["providerStatus"] == "COMPLETED:APPROVED"
    assert kyc["error"] == "BRLA / Avenia sent a KYC status we have no mapping for: 'ON-HOLD'"


def test_monerium_client_credentials_are_checked_and_a_revoked_token_is_renewed(
    ramps, user, client, api_client, token, settings
):
    monerium, _ = ramps
    monerium.profiles["p-1"] = "pending"
    link(user, RampCurrency.EUR, "p-1")
    assert profile(api_client, token)["ramps"]["EUR"]["kyc"]["status"] == "pending"
    monerium.tokens.clear()  # Monerium revoked the cached token
    monerium.profiles["p-1"] = "approved"
    assert profile(api_client, token)["ramps"]["EUR"]["kyc"]["status"] == "approved"
    assert monerium.requests.count("POST /auth/token") == 2
    settings.MONERIUM_CLIENT_SECRET = "wrong"
    monerium.tokens.clear()
    from django.core.cache import cache

    cache.clear()
    kyc = profile(api_client, token)["ramps"]["EUR"]["kyc"]
    assert kyc["status"] == "approved"
    assert "Monerium refused our client credentials (401)" in kyc["error"]


def test_profile_needs_its_scope_and_shows_only_the_callers_data(
    ramps, user, other_user, api_client, application, make_token
):
    monerium, _ = ramps
    monerium.profiles["p-1"] = "approved"
    link(user, RampCurrency.EUR, "p-1")
    wrong = make_token(user, application, scope="read:balances")
    response = api_client.get("/api/v1/profile", wrong)
    assert response.status_code == 403
    theirs = profile(api_client, make_token(other_user, application, scope="read:profile"))
    assert theirs["userId"] == str(other_user.pk) and theirs["cards"] == []
    assert theirs["ramps"]["EUR"]["accountId"] is None
    assert monerium.requests == []  # nobody asked Monerium about someone else's profile


def test_staff_see_ramp_accounts_read_only_and_can_refresh_them(ramps, user, staff_user, client):
    monerium, _ = ramps
    monerium.profiles["p-1"] = "pending"
    ramp = link(user, RampCurrency.EUR, "p-1")
    client.force_login(staff_user)
    page = client.get(f"/admin/actions/rampaccount/{ramp.pk}/change/")
    assert page.status_code == 200
    assert b'name="kyc_status"' not in page.content  # the provider's word, not editable
    response = client.post(
        "/admin/actions/rampaccount/",
        {"action": "refresh_kyc", "_selected_action": [ramp.pk]},
        follow=True,
    )
    assert b"Refreshed 1 of 1" in response.content
    ramp.refresh_from_db()
    assert (ramp.kyc_status, ramp.provider_status) == ("pending", "pending")
