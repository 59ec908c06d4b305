"""The consent page (who asks, in plain words, with a warning for a self-registered agent) and
"Connected agents" (each grant with its scopes and last use; Disconnect kills its tokens)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from babel.dates import format_date, format_time
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from mcp_adapter.server import DjangoTokenVerifier
from oauth import selectors
from oauth.models import AgentUse, ClientProfile
from oauth.services import agent_revoke

pytestmark = pytest.mark.django_db


def test_the_consent_page_says_who_asks_and_what_it_may_do(code_flow, public_client):
    ClientProfile.objects.create(
        client_id=public_client.client_id,
        client_uri="https://agent.example/",
        logo_uri="https://cdn.agent.example/logo.png",
    )
    page = code_flow.consent_page(scope="read:balances write:actions")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Registered agent wants to use your Picnic account" in html
    assert 'id="unverified"' in html  # it registered itself
    assert "https://agent.example/" in html
    # The logo is not fetched yet (a background task does it): the monogram, and never the
    # agent's own URL (the page's CSP would block it, and the logo host would see our user).
    assert "cdn.agent.example" not in html
    assert '<span class="monogram" aria-hidden="true">R</span>' in html
    assert ClientProfile.objects.get(client_id=public_client.client_id).logo_requested_at
    assert "The token balances of your smart accounts" in html
    assert "sign it with your passkey" in html
    assert "<strong>127.0.0.1</strong>" in html and "a program running on this computer" in html
    # The answer redirects to the agent's callback: this page's CSP allows that beyond the
    # site's own, and no image source (a logo we hold is served from our origin).
    csp = page["Content-Security-Policy"]
    assert csp.endswith("form-action 'self' http://127.0.0.1:9999")
    assert "img-src 'self' data:;" in csp


def test_a_client_staff_registered_shows_no_warning(code_flow, public_client):
    Application.objects.filter(pk=public_client.pk).update(
        registration_source=Application.RegistrationSource.MANUAL
    )
    html = code_flow.consent_page().content.decode()
    assert 'id="unverified"' not in html
    assert "img-src 'self' data:;" in code_flow.consent_page()["Content-Security-Policy"]


def test_deny_sends_the_agent_away_with_nothing(code_flow):
    code_flow.client.force_login(code_flow.user)
    answer = code_flow.client.post("/o/authorize/", code_flow.params())  # no "allow"
    assert answer.status_code == 302
    assert "error=access_denied" in answer["Location"]
    assert "iss=http%3A%2F%2Ftestserver" in answer["Location"]  # RFC 9207 on errors too
    assert not Grant.objects.exists()


def test_an_unknown_client_gets_an_error_page_not_a_redirect(code_flow):
    page = code_flow.consent_page(client_id="nobody")
    assert page.status_code == 400
    assert "This request cannot be approved" in page.content.decode()


def test_the_consent_page_asks_a_signed_out_user_to_sign_in(client, code_flow):
    answer = client.get("/o/authorize/", code_flow.params())
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/?next=")


def _connect(code_flow, scope="read:actions", resource=None) -> dict:
    extra = {"resource": resource} if resource else {}
    answer = code_flow.approve(scope=scope, **extra)
    issued = code_flow.token(answer["code"])
    assert issued.status_code == 200, issued.content
    return issued.json()


def test_connected_agents_lists_each_grant_with_its_scopes_and_last_use(
    code_flow, client, user, mcp_resource
):
    tokens = _connect(code_flow, scope="read:actions read:balances", resource=mcp_resource)
    client.force_login(user)
    page = client.get("/agents/").content.decode()
    assert "Registered agent" in page
    assert "The token balances of your smart accounts" in page
    assert "Not yet" in page  # it has not called the MCP server
    assert DjangoTokenVerifier._verify(tokens["access_token"]) is not None  # an MCP request
    assert AgentUse.objects.filter(user=user, application=code_flow.application).exists()
    client.force_login(user)
    assert "Not yet" not in client.get("/agents/").content.decode()


def test_connected_agents_lists_what_an_agent_may_send_without_asking(
    code_flow, client, user, monkeypatch
):
    from actions.permissions.models import SpendPermissionStatus
    from actions.tests.factories import make_offline_wallet, make_permission

    _connect(code_flow, scope="read:actions write:actions")
    client.force_login(user)
    page = client.get("/agents/").content.decode()
    # No permission: the passkey claim is true, and no grant is listed.
    assert "Nothing moves until you open the proposal and sign it with your passkey." in page
    assert "no-prompt-" not in page

    account = make_offline_wallet(user, monkeypatch)
    active = make_permission(
        user=user, application=code_flow.application, account=account, name="groceries"
    )
    make_permission(
        user=user,
        application=code_flow.application,
        account=account,
        name="old rent",
        status=SpendPermissionStatus.REVOKED,
        session_key_encrypted="",
    )
    page = client.get("/agents/").content.decode()
    assert "Nothing moves until you open the proposal" not in page
    assert "Within its active spending permissions (below) it sends with no prompt" in page
    assert f'id="no-prompt-{code_flow.application.pk}"' in page
    assert f'data-permission="{active.pk}"' in page and "<strong>groceries</strong>" in page
    assert "Registered agent may send up to 50 USDC per week to merchant.eth (0x" in page
    assert "old rent" not in page  # revoked: it moves nothing any more
    assert 'href="/permissions/"' in page
    page = client.get("/agents/", HTTP_ACCEPT_LANGUAGE="pt-BR").content.decode()
    assert "Pode enviar sem perguntar a você" in page
    assert "Dentro das suas permissões de gasto ativas" in page


def test_disconnect_kills_every_token_of_that_agent_only(
    code_flow, client, user, other_user, make_application, make_token, api_client
):
    tokens = _connect(code_flow)
    other_app = make_application("another agent")
    kept = make_token(user, other_app)
    theirs = make_token(other_user, code_flow.application)
    client.force_login(user)
    answer = client.post(f"/agents/{code_flow.application.pk}/revoke")
    assert answer.status_code == 302 and answer["Location"] == "/agents/"
    assert not AccessToken.objects.filter(user=user, application=code_flow.application).exists()
    assert not RefreshToken.objects.filter(
        user=user, application=code_flow.application, revoked__isnull=True
    ).exists()
    # The revoked token gets RFC 6750's invalid_token, in the API's one error shape, saying
    # why: not "Authentication credentials were not provided".
    refused = api_client.get("/api/v1/profile", tokens["access_token"])
    assert refused.status_code == 401
    assert refused.json() == {
        "detail": "The access token is not valid: it was revoked (the user disconnected this "
        "agent) or never issued. Authorize again.",
        "code": "invalid_token",
        "errors": {},
    }
    assert refused["WWW-Authenticate"].startswith('Bearer realm="api",error="invalid_token",')
    assert "it was revoked" in refused["WWW-Authenticate"]
    refreshed = client.post(
        "/o/token/",
        {
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": code_flow.application.client_id,
        },
    )
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"
    # Another agent of the same user, and another user of the same agent, keep theirs.
    assert AccessToken.objects.filter(pk__in=[kept.pk, theirs.pk]).count() == 2


def test_an_expired_token_is_invalid_token_and_no_token_is_not_authenticated(
    user, application, make_token, api_client, client
):
    expired = make_token(user, application, expires_in=-10)
    refused = api_client.get("/api/v1/profile", expired)
    assert refused.status_code == 401 and refused.json()["code"] == "invalid_token"
    assert refused.json()["detail"] == (
        "The access token has expired. Use the refresh token, or authorize again."
    )
    assert 'error="invalid_token"' in refused["WWW-Authenticate"]
    nothing = client.get("/api/v1/profile")
    assert nothing.status_code == 401 and nothing.json()["code"] == "not_authenticated"


def test_disconnect_answers_post_only_and_only_for_the_signed_in_user(client, user, code_flow):
    _connect(code_flow)
    assert client.post(f"/agents/{code_flow.application.pk}/revoke").status_code == 302
    assert AccessToken.objects.filter(user=user).exists()  # not signed in: nothing happened
    client.force_login(user)
    assert client.get(f"/agents/{code_flow.application.pk}/revoke").status_code == 405
    assert client.post("/agents/999999/revoke").status_code == 302  # nothing to disconnect


def test_agent_revoke_counts_what_it_revoked(code_flow, user):
    _connect(code_flow)
    revoked = agent_revoke(user=user, application_id=code_flow.application.pk)
    assert (revoked.access_tokens, revoked.refresh_tokens) == (1, 1)
    again = agent_revoke(user=user, application_id=code_flow.application.pk)
    assert (again.access_tokens, again.refresh_tokens) == (0, 0)


# --- In the user's language ------------------------------------------------------------------


def test_the_consent_page_speaks_the_browsers_language(code_flow, public_client):
    code_flow.client.force_login(code_flow.user)
    params = code_flow.params(scope="read:balances write:actions")
    page = code_flow.client.get("/o/authorize/", params, HTTP_ACCEPT_LANGUAGE="pt-BR")
    html = page.content.decode()
    assert page.status_code == 200 and '<html lang="pt-br">' in html
    assert "Registered agent quer usar sua conta Picnic" in html
    assert "Os saldos de tokens das suas contas inteligentes" in html  # a scope, in plain words
    assert "assiná-la com sua chave de acesso" in html
    assert 'id="unverified"' in html and "O Picnic não verificou este agente" in html
    assert ">Aprovar</button>" in html and ">Negar</button>" in html
    assert 'action="/i18n/setlang/"' in html  # the end-user base: the language switcher
    assert 'href="/agents/"' in html  # and the way to Connected agents
    # The base's own assets are the site's: the page's CSP still needs only the callback.
    assert page["Content-Security-Policy"].endswith("form-action 'self' http://127.0.0.1:9999")

    page = code_flow.client.get("/o/authorize/", params, HTTP_ACCEPT_LANGUAGE="es")
    html = page.content.decode()
    assert '<html lang="es">' in html
    assert "Registered agent quiere usar tu cuenta Picnic" in html
    assert "Proponer acciones de billetera" in html
    assert ">Aprobar</button>" in html


def test_the_switchers_choice_wins_over_the_browser_on_the_consent_page(code_flow):
    code_flow.client.force_login(code_flow.user)
    authorize = "/o/authorize/?" + urlencode(code_flow.params())
    answer = code_flow.client.post("/i18n/setlang/", {"language": "es", "next": authorize})
    assert answer.status_code == 302 and answer["Location"] == authorize
    html = code_flow.client.get(authorize, HTTP_ACCEPT_LANGUAGE="pt-BR").content.decode()
    assert "Podrá ver" in html


def test_the_error_page_is_translated_too(code_flow):
    code_flow.client.force_login(code_flow.user)
    params = code_flow.params(client_id="nobody")
    page = code_flow.client.get("/o/authorize/", params, HTTP_ACCEPT_LANGUAGE="es")
    assert page.status_code == 400
    assert "Esta solicitud no se puede aprobar" in page.content.decode()


def test_connected_agents_in_spanish_and_portuguese(code_flow, client, user):
    _connect(code_flow, scope="read:actions read:balances")
    client.force_login(user)
    html = client.get("/agents/", HTTP_ACCEPT_LANGUAGE="es").content.decode()
    assert "<h1>Agentes conectados</h1>" in html
    assert "Los saldos de tokens de tus cuentas inteligentes" in html
    assert "Todavía no" in html and "Desconectar" in html
    [agent] = selectors.connected_agents(user=user)
    connected = agent.connected_at
    # Dates in the language's CLDR format, to the minute, with the zone ("3 dic 2026, 19:40 UTC").
    assert f"{l10n_datetime(connected, 'es')} UTC" in html
    html = client.get("/agents/", HTTP_ACCEPT_LANGUAGE="pt-BR").content.decode()
    assert "Pode ver" in html and "Ainda não" in html
    assert f"{l10n_datetime(connected, 'pt_BR')} UTC" in html
    answer = client.post(f"/agents/{code_flow.application.pk}/revoke", HTTP_ACCEPT_LANGUAGE="es")
    html = client.get(answer["Location"], HTTP_ACCEPT_LANGUAGE="es").content.decode()
    assert "Desconectado: los tokens de ese agente ya no funcionan." in html
    assert "No hay ningún agente conectado." in html


def test_the_oauth_endpoints_agents_call_stay_english(code_flow, client):
    """The JSON is for programs: an agent's Accept-Language changes nothing."""
    answer = client.post(
        "/o/token/",
        {"grant_type": "authorization_code", "code": "x\x00"},
        HTTP_ACCEPT_LANGUAGE="pt-BR",
    )
    assert answer.status_code == 400 and answer["Content-Language"].startswith("en")
    assert answer.json()["error_description"] == "The request contains a NUL character"
    registered = client.post(
        "/o/register/", "[]", content_type="application/json", HTTP_ACCEPT_LANGUAGE="es"
    )
    assert registered.status_code == 400 and registered["Content-Language"].startswith("en")
    assert registered.json()["error_description"] == "The registration body must be a JSON object"
    metadata = client.get("/.well-known/oauth-authorization-server", HTTP_ACCEPT_LANGUAGE="es")
    assert metadata.status_code == 200 and metadata["Content-Language"].startswith("en")
    # The consent page, under the same /o/, is the user's.
    code_flow.client.force_login(code_flow.user)
    page = code_flow.client.get("/o/authorize/", code_flow.params(), HTTP_ACCEPT_LANGUAGE="es")
    assert page["Content-Language"] == "es"


def l10n_datetime(value, locale: str) -> str:
    """The language's medium date and short time, joined as it joins them."""
    zone = timezone.get_current_timezone()
    date = format_date(value.astimezone(zone), "medium", locale=locale)
    time = format_time(value, "short", tzinfo=zone, locale=locale)
    return {"es": f"{date}, {time}", "pt_BR": f"{date} {time}"}[locale]
