"""The action tools and read tools against careless or hostile input. Every refusal
is a 4xx in the one error body naming the field; nothing is written; no internal address is
shown to the client; an unreachable chain is a 503, not a 500."""

from __future__ import annotations

import pytest

from actions.execution.models import Action
from actions.tests.factories import made_up_address, make_offline_wallet
from core.chains import with_endpoints
from dev.testing import ScriptedServer

pytestmark = pytest.mark.django_db

USDC = f"eip155:31337/erc20:{made_up_address('USDC')}"
WALLET_SCOPES = "write:actions read:card read:balances"


@pytest.fixture
def accounts(user, monkeypatch):
    return make_offline_wallet(user, monkeypatch)


@pytest.fixture
def token(user, application, make_token):
    return make_token(user, application, scope=WALLET_SCOPES)


def _refused(response, field: str) -> list[str]:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_input"
    assert body["detail"] == "Invalid input"
    assert field in body["errors"], body
    return body["errors"][field]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("asset_id", USDC + "\n"),  # `$` would match before it
        ("asset_id", USDC.replace(":31337/", ":031337/")),  # a chain id with a leading zero
        ("asset_id", USDC.replace("31337", "٣١٣٣٧")),  # Unicode digits
        ("amount", "1e1000"),
        ("amount", "1_000"),
        ("amount", "+1"),
        ("amount", " 7 "),
        ("amount", "１０"),
        ("amount", "10\n"),
        ("amount", "9" * 200),  # longer than any uint256
        ("to", "0x" + "12" * 20 + "\n"),
        ("to", "x" * 300),
        ("to", "\x00"),
        ("to", "\ud800"),
    ],
)
def test_transfer_input_is_checked_whole_and_nothing_is_proposed(
    accounts,
    api_client,
    token,
    field,
    value,
):
    body = {"asset_id": USDC, "amount": "1", "to": "0x" + "12" * 20, field: value}
    response = api_client.post("/api/v1/actions/transfer", token, body)
    _refused(response, field)
    assert Action.objects.count() == 0


@pytest.mark.parametrize("value", ["1_000", "１０", "١٠", " 7 ", "+1", "10\n", "1e3", "-5"])
def test_card_limit_takes_ascii_digits_only(accounts, api_client, token, value):
    response = api_client.post("/api/v1/actions/card_limit", token, {"daily_limit": value})
    messages = _refused(response, "daily_limit")
    assert "does not match" in messages[0]
    assert Action.objects.count() == 0


def test_the_services_refuse_the_same_amounts_without_the_schema():
    from actions.tool_requests.checks import ToolError, units_of

    for value in ["1_000", "１０", "١٠", " 7 ", "+1", "10\n", "1e3", "NaN", "Infinity"]:
        with pytest.raises(ToolError, match="decimal string of digits"):
            units_of(value, 6)
    with pytest.raises(ToolError, match="too large"):
        units_of("1" + "0" * 78, 0)  # 10**78 > 2**256 - 1: would not encode as a uint256
    assert units_of("12.5", 6) == (pytest.approx(12.5), 12_500_000)


def test_the_zero_address_is_refused_as_a_recipient(accounts, api_client, token):
    body = {"asset_id": USDC, "amount": "1", "to": "0x" + "00" * 20}
    response = api_client.post("/api/v1/actions/transfer", token, body)
    assert response.status_code == 400, response.content
    assert response.json() == {
        "detail": "to must not be the zero address: tokens sent there are lost",
        "code": "invalid",
        "errors": {},
    }
    assert Action.objects.count() == 0


@pytest.mark.parametrize("card_id", ["\x00", "card-1\n", "c" * 101])
def test_get_card_refuses_a_card_id_the_column_cannot_hold(accounts, api_client, token, card_id):
    response = api_client.get("/api/v1/card", token, {"card_id": card_id})
    messages = _refused(response, "card_id")
    assert "chain" not in " ".join(messages)


def test_a_nul_card_id_is_named_as_such(accounts, api_client, token):
    response = api_client.get("/api/v1/card", token, {"card_id": "\x00"})
    assert response.json()["errors"] == {"card_id": ["must not contain NUL characters (U+0000)"]}


@pytest.mark.parametrize("path", ["/api/v1/actions/transfer", "/api/v1/actions/swap"])
def test_an_unreachable_chain_on_a_write_tool_is_a_503_without_the_address(
    accounts,
    api_client,
    token,
    settings,
    path,
):
    with ScriptedServer() as server:  # a port that was just serving, now closed: refused
        url = server.url
    settings.CHAINS = with_endpoints(settings.CARD_CHAIN_ID, rpc_url=url)
    settings.BUNDLER_URL = url
    settings.SWAP_QUOTE_URL = url
    body = {"asset_id": USDC, "amount": "1", "to": "0x" + "12" * 20}
    if path.endswith("swap"):
        usdt = f"eip155:31337/erc20:{made_up_address('EURe')}"
        body = {"from_asset_id": USDC, "to_asset_id": usdt, "amount": "1"}
    response = api_client.post(path, token, body)
    assert response.status_code in (400, 503), response.content
    text = response.content.decode()
    host_port = url.split("://", 1)[1].rstrip("/")
    assert host_port not in text and "127.0.0.1" not in text, text
    if path.endswith("transfer"):  # the account client reads the chain first
        assert response.status_code == 503
        assert response.json()["code"] == "chain_unavailable"
        assert response.json()["detail"].startswith(
            "The chain Gnosis (local) could not be read: connection"
        )
    assert Action.objects.count() == 0


def test_redact_removes_internal_addresses_and_keeps_the_reason():
    from core.api import failure_reason, redact

    raw = (
        "HTTPConnectionPool(host='127.0.0.1', port=8545): Max retries exceeded with url: / "
        "(Caused by NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f12>: "
        "Failed to establish a new connection: [Errno 111] Connection refused'))"
    )
    assert "127.0.0.1" not in redact(raw) and "8545" not in redact(raw)
    assert redact("could not connect to rpc.internal:8545: timed out") == (
        "could not connect to <internal>: timed out"
    )
    assert redact("http://10.0.0.5:4337/rpc said no") == "<internal> said no"
    assert redact("AA21 didn't pay prefund at 12:30:45") == "AA21 didn't pay prefund at 12:30:45"
    caip = "Unknown token: eip155:31337/erc20:0x" + "12" * 20  # a CAIP id is not a host:port
    assert redact(caip) == caip

    import requests

    assert failure_reason(requests.ConnectionError(raw)) == "connection refused"
    assert failure_reason(requests.ReadTimeout(raw)) == "timed out"


@pytest.mark.parametrize("path", ["/api/v1/actions/{}", "/api/v1/operations/{}"])
def test_a_60_kb_id_in_the_path_is_not_echoed_back(user, application, make_token, client, path):
    """The whole id came back in `detail`."""
    token = make_token(user, application, scope="read:actions operations:read")
    long_id = "a" * 60_000
    response = client.get(path.format(long_id), headers={"Authorization": f"Bearer {token.token}"})
    assert response.status_code == 404
    body = response.json()
    assert body["code"] == "not_found"
    assert body["detail"].endswith(": " + repr("a" * 32) + "…")
    assert len(response.content) < 500


def test_a_short_unknown_id_is_still_named_as_sent(user, application, make_token, client):
    token = make_token(user, application, scope="read:actions")
    response = client.get(
        "/api/v1/actions/no-such-action", headers={"Authorization": f"Bearer {token.token}"}
    )
    assert response.status_code == 404
    assert response.json()["detail"] == "Action not found: no-such-action"
