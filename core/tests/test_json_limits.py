"""One JSON size/UTF-8/nesting limit in front of every JSON entry point (core.json_input):
DRF's parser, the signing page's approve endpoint, passkey registration. A body nested
200 000 deep segfaulted the web server (py_ecc raises the recursion limit, the C decoder
overflowed the C stack); now it is a 400 in the one error body that never echoes the body."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.conf import settings

from actions.accounts.models import Passkey
from actions.accounts.pages import REGISTRATION_SESSION_KEY
from actions.execution.models import Action, ActionStatus
from actions.tests.factories import make_action
from core.json_input import MAX_DEPTH, max_body_bytes, nesting_depth
from dev.testing import database_url, wait_until
from messaging.models import Conversation, Delivery
from messaging.tests.conftest import member, social_account, workspace  # noqa: F401 - fixtures

DM = "/private-messaging-api/actions"
SCOPES = "read:actions write:actions agent:dm_read agent:dm_write operations:read operations:write"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def oversized() -> bytes:
    return json.dumps({"text": "a" * max_body_bytes()}).encode()


def refused(response, code: str = "parse_error", *, shown: str = "") -> dict:
    """A 400 in the one error body, short, naming `shown`, with none of the body in it."""
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert {"detail", "code", "errors"} <= set(body), body
    assert body["code"] == code and body["errors"] == {}
    assert shown in body["detail"]
    assert len(response.content) < 400 and b"[[[" not in response.content
    assert b"aaaa" not in response.content and b"\\ufffd" not in response.content
    return body


# --- the scan -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, depth",
    [
        (b"{}", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'"[[[[{{{"', 0),  # brackets in a string do not count
        (b'["\\"[[[", "\\\\", [[]]]', 3),  # an escaped quote does not end the string
        (b'"unterminated [[[[[', 0),
        (nested(200_000), 200_000),
        (b"]]]", 0),
    ],
)
def test_the_depth_is_counted_outside_strings(raw, depth):
    assert nesting_depth(raw) == depth


def test_the_limit_leaves_room_for_every_real_input():
    """The deepest legitimate body (a WebAuthn credential: credential → response → transports)
    is far inside the limit, which is itself accepted."""
    assert MAX_DEPTH >= 16
    assert nesting_depth(nested(MAX_DEPTH)) == MAX_DEPTH


# --- DRF: every API view parses through the one parser --------------------------------------


@pytest.fixture
def token(member, application, make_token):  # noqa: F811
    return make_token(member, application, scope=SCOPES)


def post_raw(client, path, raw: bytes, token, content_type="application/json"):
    return client.generic(
        "POST", path, raw, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token.token}"
    )


API_POSTS = [f"{DM}/status", f"{DM}/send", "/api/v1/actions/transfer", "/api/v1/operations"]


def api_views():
    from django.urls import get_resolver
    from rest_framework.views import APIView

    def walk(patterns):
        for pattern in patterns:
            if hasattr(pattern, "url_patterns"):
                yield from walk(pattern.url_patterns)
            elif isinstance(getattr(pattern.callback, "cls", None), type):
                if issubclass(pattern.callback.cls, APIView):
                    yield pattern.callback.cls

    return set(walk(get_resolver().url_patterns))


def test_every_api_view_parses_through_the_one_limited_parser():
    from core.json_input import JSONParser

    views = api_views()
    assert len(views) >= 10
    assert {v.__name__: v.parser_classes for v in views if v.parser_classes != [JSONParser]} == {}


@pytest.mark.django_db
@pytest.mark.parametrize("path", API_POSTS)
@pytest.mark.parametrize("depth", [200_000, 50_000, MAX_DEPTH + 1])
def test_a_deeply_nested_body_is_a_400_that_names_the_limit(client, token, path, depth):
    counts = (Delivery.objects.count(), Conversation.objects.count(), Action.objects.count())
    body = refused(post_raw(client, path, nested(depth), token), shown=f"{MAX_DEPTH} levels")
    assert body["detail"] == f"JSON parse error: the body is nested deeper than {MAX_DEPTH} levels"
    assert (Delivery.objects.count(), Conversation.objects.count(), Action.objects.count()) == (
        counts
    )


@pytest.mark.django_db
def test_a_body_at_the_limit_is_parsed_and_validated_as_before(client, token):
    response = post_raw(client, f"{DM}/status", nested(MAX_DEPTH), token)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input"


@pytest.mark.django_db
@pytest.mark.parametrize("path", API_POSTS)
def test_a_body_that_is_not_utf8_is_a_400(client, token, path):
    refused(post_raw(client, path, b'{"text": "\xff\xfe"}', token), shown="not UTF-8")


@pytest.mark.django_db
@pytest.mark.parametrize("path", API_POSTS)
def test_an_oversized_body_is_a_json_400_not_an_html_page(client, token, path):
    counts = (Delivery.objects.count(), Action.objects.count())
    refused(
        post_raw(client, path, oversized(), token), "body_too_large", shown=str(max_body_bytes())
    )
    assert (Delivery.objects.count(), Action.objects.count()) == counts


@pytest.mark.django_db
def test_a_form_body_is_refused_as_not_json(client, token):
    """The APIs take JSON only (as documented: 415), so no form parser reads a body unbounded."""
    response = post_raw(client, f"{DM}/status", b"a=1", token, "application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


# --- the signing page's JSON endpoints ------------------------------------------------------


def page_refused(response, code: str = "parse_error", *, shown: str = "") -> None:
    body = refused(response, code, shown=shown)
    # What passkeys.js shows: plain words in the user's language, not the parser's reason.
    assert body["error"] == "What your browser sent could not be read. Nothing changed. Try again."


SIGNING_BODIES = [
    (nested(200_000), "parse_error", f"{MAX_DEPTH} levels"),
    (nested(50_000), "parse_error", f"{MAX_DEPTH} levels"),
    (b'{"id": "\xff"}', "parse_error", "not UTF-8"),
    (b"\xc3\x28", "parse_error", "not UTF-8"),
    (None, "body_too_large", "bytes"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("raw, code, shown", SIGNING_BODIES)
def test_the_approve_endpoint_refuses_the_body_and_the_action_stays_proposed(
    client, user, application, raw, code, shown
):
    action = make_action(user=user, application=application)
    client.force_login(user)
    response = client.generic(
        "POST", f"/sign/{action.pk}/approve", raw or oversized(), "application/json"
    )
    page_refused(response, code, shown=shown)
    assert Action.objects.get(pk=action.pk).status == ActionStatus.PROPOSED


@pytest.mark.django_db
@pytest.mark.parametrize("raw, code, shown", SIGNING_BODIES)
def test_passkey_registration_refuses_the_body_and_stores_nothing(client, user, raw, code, shown):
    client.force_login(user)
    session = client.session
    session[REGISTRATION_SESSION_KEY] = "00" * 32
    session.save()
    response = client.generic(
        "POST", "/passkeys/register/verify", raw or oversized(), "application/json"
    )
    page_refused(response, code, shown=shown)
    assert Passkey.objects.count() == 0 and user.smart_accounts.count() == 0


def test_the_history_cursor_is_decoded_behind_the_same_limit():
    import base64

    from actions.history.selectors import InvalidCursor, _decode_cursor

    cursor = base64.urlsafe_b64encode(nested(200_000)).decode()
    with pytest.raises(InvalidCursor):
        _decode_cursor(cursor)


def test_the_recursion_limit_py_ecc_raised_is_back_to_the_default():
    import py_ecc  # noqa: F401 - imported: its import must not raise the limit again

    assert sys.getrecursionlimit() == 1000


# --- a real server process keeps serving ----------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_post(url: str, raw: bytes, token: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        url,
        raw,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def web_server(transactional_db, tmp_path):
    """`manage.py runserver` in its own process on the test database (a crash there is seen
    as the process exiting, not as the test run dying)."""
    port = free_port()
    log = open(tmp_path / "runserver.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=Path(settings.BASE_DIR),
        env={
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(32),
            "SPEND_PERMISSION_KEYS": Fernet.generate_key().decode(),  # required without DEBUG
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def listening() -> bool:
        assert proc.poll() is None, (tmp_path / "runserver.log").read_text()
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_until(listening, timeout=60)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def test_a_real_server_answers_400_and_keeps_serving(web_server, token, social_account):  # noqa: F811
    proc, base = web_server
    status, raw = http_post(f"{base}{DM}/status", nested(200_000), token.token)
    assert status == 400, raw[:300]
    assert json.loads(raw)["code"] == "parse_error" and len(raw) < 400
    assert proc.poll() is None  # the process is alive…
    ids = {"workspace_id": str(social_account.workspace_id)}
    ids["social_account_id"] = str(social_account.pk)
    body = json.dumps({**ids, "action_id": str(uuid.uuid4())}).encode()
    status, raw = http_post(f"{base}{DM}/status", body, token.token)
    assert status == 404 and json.loads(raw)["code"] == "not_found"  # …and still answers
    assert proc.poll() is None
