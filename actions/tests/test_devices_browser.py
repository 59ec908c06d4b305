"""Two devices in Debian's Chromium, each with its own CDP virtual authenticator: the phone
(device 1) registers, makes an "add a device" link; the laptop (device 2) opens it, signs in,
creates a passkey that signs nothing until the phone approves it (one prompt for both chains).
Both sign a transfer; the laptop removes the phone; the phone's signature is refused in plain
words, and the laptop still signs. And recovery: the phone makes a recovery code, the signed-out
laptop recovers the account with it on the recovery page."""

from __future__ import annotations

import pytest
from web3 import Web3

from actions.accounts.models import AccountChange, OwnerState, Passkey, SmartAccount
from actions.execution.models import Action
from actions.tests.browser import serve_passkeys
from chain import contracts
from chain.dev import fund, mint
from core.chains import all_chains
from dev.demo.actions import ensure_demo_tokens
from dev.testing import add_virtual_authenticator, chromium_options

pytestmark = [pytest.mark.chain, pytest.mark.browser, pytest.mark.django_db(transaction=True)]
RECIPIENT = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"
PHONE = (
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Mobile Safari/537.36"
)
LAPTOP = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36"
)


@pytest.fixture
def two_devices(live_server, chain_settings, settings, monkeypatch):
    serve_passkeys(live_server, settings, monkeypatch)
    ensure_demo_tokens()
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(**chromium_options())
        pages = []
        for agent in (PHONE, LAPTOP):
            # One browser context per device: its own cookies and its own authenticator.
            context = browser.new_context(user_agent=agent, viewport={"width": 1000, "height": 900})
            page = context.new_page()
            add_virtual_authenticator(page.context.new_cdp_session(page))
            pages.append(page)
        yield pages
        browser.close()


def _sign_in(page, url: str, next_path: str) -> None:
    page.goto(f"{url}/accounts/login/?next={next_path}")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-password")
    page.click("#sign-in")


def _registered_and_funded(page, url: str, user) -> SmartAccount:
    """Signed in on `page`, a passkey registered there; its account holds 1 ETH on every chain."""
    _sign_in(page, url, "/passkeys/")
    page.click("#register-passkey")
    page.wait_for_selector("li.passkey", timeout=30_000)
    account = SmartAccount.objects.filter(user=user, passkey__isnull=False).first()
    for chain in all_chains():
        fund(Web3(Web3.HTTPProvider(chain.rpc_url)), account.address, Web3.to_wei(1, "ether"))
    return account


def test_link_approve_both_sign_remove_one_and_its_signature_is_refused(
    two_devices, live_server, django_user_model, application, make_token, api_client
):
    phone, laptop = two_devices
    url = live_server.url
    user = django_user_model.objects.create_user("alice", password="alice-password")

    account = _registered_and_funded(phone, url, user)
    mint(Web3(Web3.HTTPProvider(all_chains()[0].rpc_url)), "USDC", account.address, 5_000_000)
    first = Passkey.objects.get(user=user)

    # Device 1 makes a link (and its QR code); device 2 opens it and signs in there.
    phone.goto(f"{url}/passkeys/add-device")
    phone.click("#create-device-link")
    phone.wait_for_selector("#device-qr svg", timeout=30_000)
    link = phone.get_attribute("#device-link-url", "href")
    laptop.goto(link)
    laptop.fill("input[name=username]", "alice")
    laptop.fill("input[name=password]", "alice-password")
    laptop.click("#sign-in")
    laptop.click("#register-passkey")
    laptop.wait_for_selector("li.passkey >> nth=1", timeout=30_000)
    second = Passkey.objects.exclude(pk=first.pk).get(user=user)
    assert second.owner_state == OwnerState.PENDING and second.device_link is not None
    assert "Waiting for approval" in laptop.inner_text(
        f'[data-credential-id="{second.credential_id}"]'
    )

    # A replayed link does nothing.
    laptop.goto(link)
    assert "already used" in laptop.inner_text("#link-refused")

    token = make_token(user, application, scope="read:actions write:actions")

    def propose() -> dict:
        response = api_client.post(
            "/api/v1/actions/transfer",
            token,
            {
                "asset_id": f"eip155:31337/erc20:{contracts.demo_token_address('USDC')}",
                "amount": "0.5",
                "to": RECIPIENT,
            },
        )
        assert response.status_code == 201, response.content
        return response.json()

    # Before approval, the laptop's passkey signs nothing.
    waiting = propose()
    laptop.goto(waiting["sign_url"])
    laptop.click("#approve")
    laptop.wait_for_selector('#sign-result[data-outcome="failed"]', timeout=30_000)
    assert "waiting for approval" in laptop.inner_text("#sign-result")

    # Device 1 approves, on a page that names the new device: one prompt, both chains.
    phone.goto(f"{url}/passkeys/")
    phone.click(f"#approve-device-{second.pk}")
    assert "Chrome on Windows" in phone.inner_text("#device-facts")
    phone.click("#approve")
    phone.wait_for_selector('[data-status="executed"]', timeout=120_000)
    second.refresh_from_db()
    assert (second.owner_state, second.owner_index) == (OwnerState.ACTIVE, 1)
    change = AccountChange.objects.get(kind="add_owner")
    assert len(change.ops) == 2 and all(op["done"] for op in change.ops)

    # Both sign transfers (the laptop's was refused above: nothing was signed; a new one).
    from_laptop = propose()
    laptop.goto(from_laptop["sign_url"])
    assert "Signs with one of your passkeys" in laptop.inner_text("#signing-passkey")
    laptop.click("#approve")
    laptop.wait_for_selector('[data-status="executed"]', timeout=90_000)
    from_phone = propose()
    phone.goto(from_phone["sign_url"])
    phone.click("#approve")
    phone.wait_for_selector('[data-status="executed"]', timeout=90_000)

    # The laptop removes the phone (signed by the laptop's own passkey).
    laptop.goto(f"{url}/passkeys/")
    laptop.click(f"#remove-{first.pk}")
    laptop.click("#remove-yes")
    laptop.click("#approve")
    laptop.wait_for_selector('[data-status="executed"]', timeout=120_000)
    first.refresh_from_db()
    assert first.owner_state == OwnerState.REMOVED

    # The phone's signature is refused in plain words; the laptop still signs.
    last = propose()
    phone.goto(last["sign_url"])
    phone.click("#approve")
    phone.wait_for_selector('#sign-result[data-outcome="failed"]', timeout=30_000)
    assert "This passkey was removed from your account on" in phone.inner_text("#sign-result")
    assert Action.objects.get(pk=last["action_id"]).status == "proposed"
    laptop.goto(last["sign_url"])
    laptop.click("#approve")
    laptop.wait_for_selector('[data-status="executed"]', timeout=90_000)
    assert "Signed with" in laptop.inner_text("#signing-passkey")


def test_a_recovery_code_made_on_one_device_recovers_the_account_on_another(
    two_devices, live_server, django_user_model
):
    """The phone makes a recovery code and approves its key on chain; the laptop, signed out,
    creates a passkey on the recovery page with the code: the recovery waits for its delay."""
    from django.core.cache import cache  # noqa: PLC0415

    cache.clear()  # the recovery attempt counts of earlier tests
    phone, laptop = two_devices
    url = live_server.url
    user = django_user_model.objects.create_user("alice", password="alice-password")
    _registered_and_funded(phone, url, user)

    phone.goto(f"{url}/passkeys/recovery-code")
    phone.click("#create-recovery-code")
    code = phone.inner_text("#recovery-code")
    phone.click("#recovery-approve")
    phone.click("#approve")
    phone.wait_for_selector('[data-status="executed"]', timeout=120_000)

    laptop.goto(f"{url}/recover/")
    laptop.fill("#recover-username", "alice")
    laptop.fill("#recover-code", code)
    laptop.click("#recover")
    laptop.wait_for_selector('#recover-result[data-outcome="started"]', timeout=60_000)
    assert "Recovery started" in laptop.inner_text("#recover-result")
    recovery = AccountChange.objects.get(user=user, kind="recovery")
    assert recovery.status == "waiting" and recovery.ready_at is not None
    assert recovery.passkey.owner_state == OwnerState.PENDING
    assert Passkey.objects.filter(user=user).count() == 2
