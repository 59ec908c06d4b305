"""The OAuth settings from the environment: the hosted-client allowlist, its schemes, and what
stops start-up."""

from __future__ import annotations

import pytest

from picnic.tests.test_settings_security import _python, _settings

CURSOR = "cursor://anysphere.cursor-mcp/oauth/callback"
CLAUDE = "https://claude.ai/api/mcp/auth_callback"


def test_listed_callbacks_and_their_private_use_schemes_are_allowed():
    values = _settings(
        ["OAUTH2_DCR_REDIRECT_URIS", "OAUTH2_PROVIDER", "OAUTH2_CIMD_ALLOW_LOOPBACK"],
        OAUTH2_DCR_REDIRECT_URIS=f"{CURSOR}, {CLAUDE}",
    )
    assert values["OAUTH2_DCR_REDIRECT_URIS"] == [CURSOR, CLAUDE]
    schemes = values["OAUTH2_PROVIDER"]["ALLOWED_REDIRECT_URI_SCHEMES"]
    assert schemes == ["http", "https", "cursor"]
    assert values["OAUTH2_CIMD_ALLOW_LOOPBACK"] is False  # off unless said


@pytest.mark.parametrize(
    "value",
    [
        "javascript:alert(1)",
        "data:text/html,hi",
        "file:///etc/passwd",
        "https://claude.ai/cb#frag",
        "http://claude.ai/cb",
        "not a uri",
    ],
)
def test_an_unsafe_listed_callback_stops_start_up(value):
    result = _python("print('started')", OAUTH2_DCR_REDIRECT_URIS=value)
    assert result.returncode != 0
    assert "OAUTH2_DCR_REDIRECT_URIS" in result.stderr.splitlines()[-1]


def test_the_fetch_deadlines_default_to_five_seconds():
    values = _settings(["OAUTH2_CIMD_FETCH_SECONDS", "AGENT_LOGO_TIMEOUT_SECONDS"])
    assert values == {"OAUTH2_CIMD_FETCH_SECONDS": 5.0, "AGENT_LOGO_TIMEOUT_SECONDS": 5.0}


@pytest.mark.parametrize("name", ["OAUTH2_CIMD_FETCH_SECONDS", "AGENT_LOGO_TIMEOUT_SECONDS"])
@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_bad_fetch_deadline_stops_start_up(name, value):
    result = _python("print('started')", **{name: value})
    assert result.returncode != 0
    assert name in result.stderr.splitlines()[-1]
