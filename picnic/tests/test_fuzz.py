"""Schemathesis against the live `/api/schema/`: every documented operation gets generated
inputs (valid and not: the request bodies and GET query parameters are the contracts' own JSON
Schemas, core.api.ApiAutoSchema), and no answer may be a 5xx or break its documented
response schema (the Error component for every error). Bounded and derandomized so CI is
deterministic; every outside service points at a closed port, so the calls that need one fail
fast with their 503."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from actions.tests.factories import make_offline_wallet
from messaging.tests.factories import TOKEN_ENV, X_TOKEN, make_social_account

CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port: connections are refused


def no_server_error(ctx, response, case):
    """Any 5xx fails, except a 503 the operation documents (its dependency is down here, on
    purpose): response_schema_conformance then holds its body to the Error component."""
    if response.status_code == 503 and "503" in case.operation.definition.raw["responses"]:
        return None
    return not_a_server_error(ctx, response, case)


CHECKS = [no_server_error, response_schema_conformance]
FUZZ = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def offline(db, settings):
    for name in (
        "CHAIN_RPC_URL",
        "BUNDLER_RPC_URL",
        "SWAP_QUOTE_URL",
        "GNOSIS_PAY_URL",
        "PRICE_API_URL",
        "MONERIUM_URL",
        "AVENIA_URL",
        "X_API_BASE_URL",
        "OPERATIONS_BACKEND_URL",
    ):
        setattr(settings, name, CLOSED)
    # Every chain of the table: its node and bundler closed too.
    settings.CHAINS = tuple(
        dataclasses.replace(row, rpc_url=CLOSED, bundler_url=CLOSED) for row in settings.CHAINS
    )
    for name in (
        "CHAIN_READ_TIMEOUT_SECONDS",
        "BUNDLER_TIMEOUT_SECONDS",
        "SWAP_QUOTE_TIMEOUT_SECONDS",
        "GNOSIS_PAY_TIMEOUT_SECONDS",
        "PRICE_API_TIMEOUT_SECONDS",
        "RAMP_TIMEOUT_SECONDS",
        "DM_PROVIDER_TIMEOUT_SECONDS",
        "OPERATIONS_BACKEND_TIMEOUT_SECONDS",
    ):
        setattr(settings, name, 0.5)
    # The WSGI handler closes the connection around each request; inside the test's transaction
    # that would drop it (Django's own test client disconnects the same handler).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(user, application, make_token, monkeypatch):
    """A token with every scope, for a user with a Picnic account, a card, and an agent seat
    in a workspace with a social account: the fuzzer gets past the "nothing to act on" 4xx."""
    from django.conf import settings as django_settings

    make_offline_wallet(user, monkeypatch)
    monkeypatch.setenv(TOKEN_ENV, X_TOKEN)
    make_social_account(member=user)
    token = make_token(user, application, scope=" ".join(django_settings.OAUTH2_SCOPES))
    return {"Authorization": f"Bearer {token.token}"}


# Loaded at collection (the schema view reads no database). Not `from_fixture`: its lazy
# loader sets a pytest-internal attribute pytest 9 no longer has.
schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())


@schema.parametrize()
@FUZZ
def test_api_fuzz_authenticated(case, offline, bearer):
    response = case.call(headers=bearer)
    case.validate_response(response, checks=CHECKS, headers=bearer)


@schema.parametrize()
@FUZZ
def test_api_fuzz_unauthenticated(case, offline):
    response = case.call()
    case.validate_response(response, checks=CHECKS)


# --- What the fuzzer found, pinned -------------------------------------------------------


def test_card_freeze_with_gnosis_pay_unreachable_answers_503(client, offline, bearer):
    """It answered 400 `invalid`, as if the input were wrong, with the provider down."""
    from actions.execution.models import Action

    before = Action.objects.count()
    response = client.post(
        "/api/v1/actions/card_freeze", {}, content_type="application/json", headers=bearer
    )
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "gnosis_pay_unavailable"
    assert body["detail"].startswith("Gnosis Pay could not start the sign-in: ")
    assert body["errors"] == {}
    assert "127.0.0.1" not in response.content.decode()
    assert Action.objects.count() == before


def test_transactions_sync_error_names_no_internal_address(client, offline, bearer):
    """`sync.chain.error` carried the RPC's host and port (HTTPConnectionPool(host=…))."""
    response = client.get("/api/v1/transactions", headers=bearer)
    assert response.status_code == 200
    error = response.json()["sync"]["chain"]["error"]
    assert error == "The chain Gnosis (local) could not be read: connection refused"
    assert "127.0.0.1" not in response.content.decode()


# --- Junk bodies on every route of the URL conf ----------------------------------------------

# Keys the project's views read, each given a value of a type no view expects.
_WRONG_TYPES = {
    key: value
    for key, value in zip(
        (
            "credential",
            "response",
            "permission",
            "name",
            "username",
            "code",
            "token",
            "time_zone",
            "reason",
            "note",
            "ids",
            "kind",
            "q",
            "next",
            "language",
            "client_id",
            "redirect_uris",
            "grant_type",
            "decision",
            "action",
        ),
        [[], {}, 5, True, None, 1.5, [{"a": []}], {"b": {}}] * 3,
        strict=False,
    )
}
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
JUNK: dict[str, tuple[str, bytes]] = {
    "not_json": (JSON, b"this is not json"),
    "truncated": (JSON, b'{"credential": {"id": '),
    "array": (JSON, b'[1, "two", null]'),
    "scalar": (JSON, b'"a string"'),
    "wrong_types": (JSON, json.dumps(_WRONG_TYPES).encode()),
    "nul": (JSON, b'{"name": "a\\u0000b", "credential": "\\u0000"}'),
    "lone_surrogate": (JSON, b'{"name": "\\ud800", "credential": {"id": "\\udfff"}}'),
    "not_utf8": (JSON, b'{"name": "\xed\xa0\x80\xff"}'),
    "deep": (JSON, b"[" * 5000),
    "huge": (JSON, b'{"name": "' + b"a" * 3_000_000 + b'"}'),
    "form_junk": (FORM, b"permission=" + b"x" * 36 + b"&permission=%00&name=%ED%A0%80&id[]=1"),
    "form_huge": (FORM, b"name=" + b"a" * 3_000_000),
    "form_many": (FORM, b"&".join(b"f%d=1" % i for i in range(5000))),
}
_ROUTE_ARGS = {"int": "1", "uuid": "00000000-0000-4000-8000-000000000001", "path": "x"}


def _post_routes() -> list[str]:
    """Every path of the URL conf with its parameters filled in (a POST is tried on each: a
    405 is an answer too)."""
    from django.urls import URLResolver, get_resolver
    from django.urls.resolvers import RoutePattern

    paths: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            if not isinstance(pattern.pattern, RoutePattern):
                continue  # a regex route: none of ours takes a body (Django's own i18n, static)
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            else:
                paths.append(
                    "/"
                    + re.sub(
                        r"<(?:(\w+):)?\w+>",
                        lambda m: _ROUTE_ARGS.get(m.group(1) or "str", "x"),
                        route,
                    )
                )

    walk(get_resolver().url_patterns, "")
    return sorted(set(paths))


def _says_chain_unavailable(response) -> bool:
    if response.get("Content-Type") == JSON:
        return response.json().get("code") == "chain_unavailable"
    return b'data-code="chain_unavailable"' in response.content


@pytest.mark.parametrize("who", ["anonymous", "user", "staff"])
def test_junk_bodies_on_every_route_answer_4xx_in_the_error_shape(
    who, offline, user, staff_user, monkeypatch
):
    """`/permissions/revoke` and `/passkeys/register/verify` answered 500 to junk bodies, and
    `/passkeys/recovery-code` to any body with the chain down. Every route, every junk body:
    an answer below 500 (or the 503 `chain_unavailable` of a closed chain), and a JSON error
    is the one error body."""
    from django.test import Client

    make_offline_wallet(user, monkeypatch)
    client = Client(raise_request_exception=False)
    failures = []
    routes = _post_routes()
    for path in routes:
        for name, (content_type, body) in JUNK.items():
            # Signed in again only where a route may have signed out (/accounts/logout/):
            # a login per request cost more than the requests themselves.
            if who != "anonymous" and "_auth_user_id" not in client.session:
                client.force_login(staff_user if who == "staff" else user)
            response = client.generic("POST", path, body, content_type=content_type)
            if response.status_code == 503 and _says_chain_unavailable(response):
                continue  # the chain is closed here on purpose: that 503 is the right answer
            if response.status_code >= 500:
                failures.append(f"{path} {name}: {response.status_code}")
            elif response.status_code >= 400 and response.get("Content-Type") == JSON:
                if set(response.json()) < {"detail", "code", "errors"}:
                    failures.append(f"{path} {name}: not the error shape")
    assert len(routes) > 80
    assert failures == [], "\n".join(failures)
