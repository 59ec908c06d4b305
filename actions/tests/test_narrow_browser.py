"""Every end-user page fits a phone: at 390 and 320 px wide, in Debian's Chromium, no page is
wider than the viewport (document.documentElement.scrollWidth <= its width), in each language, with the
data that made pages overflow: full addresses, long ENS names, spending permissions with
several recipients, transfers, swaps, card actions and failures on the signing page.

In pt-BR at 390 px it also takes the phone screenshots the docs show (the activity page,
`/permissions/` and a spending permission's signing page); PICNIC_SCREENSHOT_DIR=docs/img
refreshes docs/img/enduser-pt-BR-390-<page>.png."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from actions.accounts.devices import device_link_create
from actions.accounts.models import AccountChangeKind, AccountChangeStatus, Passkey
from actions.execution.models import ACTION_LIFECYCLE, Action, ActionStatus
from actions.permissions.models import SpendPermissionStatus
from actions.tests.browser import chromium, serve_passkeys
from actions.tests.factories import (
    make_card_freeze,
    make_chain_unreachable,
    make_offline_wallet,
    make_permission,
    make_swap_action,
)
from actions.tests.test_enduser_pages import transfer
from core.formats import rfc3339
from core.lifecycle import Actor, create, lifecycle_named, transition

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (390, 320)  # the phone of the report, and the narrowest one GOV.UK designs for
LANGUAGES = ("pt-BR", "en", "es")
# Real shapes: a checksummed address, a long (valid) ENS name, a 32-byte hash.
RECIPIENT = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"
LONG_NAME = "mercadinho-da-esquina-de-pinheiros.eth"
# The pages the docs show at phone width, in pt-BR.
DOC_SHOTS = ("activity", "permissions", "sign-permission")


# What sticks out, for the failure message: the innermost elements past the right edge or
# whose content is wider than their box (a word that does not wrap).
OVERFLOWING = """() => {
  const out = (e) => e.getBoundingClientRect().right > window.innerWidth + 0.5
    || (e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0
        && getComputedStyle(e).overflowX === "visible");
  return [...document.querySelectorAll("body *")]
    .filter(e => out(e) && ![...e.children].some(out))
    .slice(0, 5)
    .map(e => `${e.tagName.toLowerCase()}.${[...e.classList].join(".")}: `
      + e.textContent.trim().slice(0, 60));
}"""


@pytest.fixture
def pages(live_server, settings, monkeypatch, user, other_user, application, make_token):
    """The user's pages, each with the data that could widen it: (name, path, [the status it
    answers, when not 200], signed in)."""
    serve_passkeys(live_server, settings, monkeypatch)
    make_chain_unreachable(settings)
    account = make_offline_wallet(user, monkeypatch)
    make_token(user, application)  # a connected agent
    recipients = [
        {"address": RECIPIENT, "name": LONG_NAME},
        {"address": "0x" + "5a" * 20, "name": ""},
    ]
    active = make_permission(
        user=user, application=application, account=account, recipients=recipients
    )
    _as_requested(active, recipients)
    make_permission(
        user=user,
        application=application,
        account=account,
        name="assinatura do serviço de streaming",
        status=SpendPermissionStatus.REVOKED,
        session_key_encrypted="",
        recipients=recipients,
    )
    # Paid under the active permission: /permissions/ lists it in a table, name and address.
    for to in (RECIPIENT, "0x" + "5a" * 20):
        paid = transfer(user, application, to=to, ens=LONG_NAME if to == RECIPIENT else "")
        Action.objects.filter(pk=paid.pk).update(spend_permission=active)
    to_name = transfer(user, application, to=RECIPIENT, ens=LONG_NAME, ens_source="to")
    to_address = transfer(user, application, to=RECIPIENT)
    failed = transfer(user, application, to=RECIPIENT)
    for status in (ActionStatus.SIGNED, ActionStatus.SUBMITTED):
        transition(lifecycle=ACTION_LIFECYCLE, pk=failed.pk, to=status, actor=Actor.worker())
    transition(
        lifecycle=ACTION_LIFECYCLE,
        pk=failed.pk,
        to=ActionStatus.FAILED,
        actor=Actor.worker(),
        updates={
            "tx_hash": "0x" + "ab" * 32,
            "block_number": 7,
            "error": "UserOperation reverted: ERC20: transfer amount exceeds balance",
        },
    )
    swap = make_swap_action(user=user, application=application)
    freeze = make_card_freeze(user=user, application=application)
    second = Passkey.objects.create(  # a second device, with what its registration recorded
        user=user,
        credential_id="cred-2",
        public_key=b"\x00",
        public_key_x="0x" + "33" * 32,
        public_key_y="0x" + "44" * 32,
        name="Notebook do trabalho (Chrome no Linux, segundo andar)",
        user_agent="Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/131.0.0.0 Safari/537.36",
        ip_coarse="203.0.113.0/24",
    )
    _, link_token = device_link_create(user=user)
    recovery = create(
        lifecycle=lifecycle_named("accountChange"),
        actor=Actor.end_user(user),
        values={
            "kind": AccountChangeKind.RECOVERY,
            "user": user,
            "account": account.address,
            "status": AccountChangeStatus.WAITING,
            "ready_at": timezone.now() + timedelta(hours=48),
        },
    )
    not_theirs = transfer(other_user, application, to=RECIPIENT)
    signed_in = [
        ("activity", "/"),
        ("passkeys", "/passkeys/"),
        ("permissions", "/permissions/"),
        ("agents", "/agents/"),
        ("add-device", "/passkeys/add-device"),
        ("recovery-code", "/passkeys/recovery-code"),
        ("sign-permission", f"/sign/{active.grant_action_id}/"),
        ("sign-transfer-ens", f"/sign/{to_name.pk}/"),
        ("sign-transfer", f"/sign/{to_address.pk}/"),
        ("sign-failed", f"/sign/{failed.pk}/"),
        ("sign-swap", f"/sign/{swap.pk}/"),
        ("sign-card", f"/sign/{freeze.pk}/"),
        ("sign-refused", f"/sign/{not_theirs.pk}/", 403),
        ("passkey-remove", f"/passkeys/{second.pk}/remove"),
        ("device-link-opened", f"/devices/link/{link_token}"),
        ("device-link-refused", "/devices/link/no-such-link", 410),
        ("account-change", f"/account-changes/{recovery.pk}/"),
    ]
    signed_out = [("sign-in", "/accounts/login/"), ("recover", "/recover/")]
    return [(*page, True) for page in signed_in] + [(*page, False) for page in signed_out]


def _as_requested(permission, recipients) -> None:
    """Its grant action with the params and summary request_spend_permission gives one."""
    from actions.permissions.grants import grant_words

    words = grant_words(
        agent="mcp-agent",
        amount="50",
        symbol="USDC",
        period="weekly",
        recipients=recipients,
        any_recipient=False,
        to_symbol=None,
    )
    Action.objects.filter(pk=permission.grant_action_id).update(
        summary=f"{words} on Gnosis (local) until 05 Jan 2027 12:00 UTC, without asking you",
        params={
            "asset_id": permission.token.asset_id,
            "symbol": "USDC",
            "allowance": "50",
            "units": "50000000",
            "period": "weekly",
            "recipients": recipients,
            "any_recipient": False,
            "starts_at": rfc3339(permission.starts_at),
            "expires_at": rfc3339(permission.expires_at),
            "purpose": "compras da semana no mercadinho",
            "name": permission.name,
            "permission_id": permission.permission_id,
            "session_key": permission.session_key_address,
        },
    )


def _session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_user_page_fits_a_phone(pages, live_server, user, language, tmp_path):
    session = _session(user)
    shots = Path(os.environ.get("PICNIC_SCREENSHOT_DIR") or tmp_path)
    too_wide = {}
    with chromium(language, width=WIDTHS[0]) as page:
        for name, path, *status, signed_in in pages:
            context = page.context
            context.clear_cookies()
            if signed_in:
                context.add_cookies(
                    [{"name": "sessionid", "value": session, "url": live_server.url}]
                )
            page.set_viewport_size({"width": WIDTHS[0], "height": 900})
            response = page.goto(f"{live_server.url}{path}")
            assert response.status == (status[0] if status else 200), (name, response.status)
            if name == "permissions":  # the widest content is there: the payments' table
                assert page.locator("table.spends tbody tr").count() == 2
            if language == "pt-BR" and name in DOC_SHOTS:
                shot = shots / f"enduser-pt-BR-390-{name}.png"
                page.screenshot(path=str(shot), full_page=True)
                assert shot.stat().st_size > 0
            for width in WIDTHS:  # the same page narrowed: it reflows, nothing is fetched again
                page.set_viewport_size({"width": width, "height": 900})
                scroll_width = page.evaluate("document.documentElement.scrollWidth")
                if scroll_width > width:
                    too_wide[f"{name} at {width} px"] = (scroll_width, page.evaluate(OVERFLOWING))
    assert too_wide == {}, language
