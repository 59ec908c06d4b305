"""`/`: end users see their activity and passkeys, staff the console, anyone else the one
sign-in page, which says which is which."""

from __future__ import annotations

import pytest

from actions.execution.models import ActionStatus
from actions.tests.factories import make_action

pytestmark = pytest.mark.django_db


def test_anyone_signed_out_is_sent_to_the_sign_in_page_that_says_which_is_which(client):
    response = client.get("/")
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/"
    page = client.get(response["Location"]).text
    assert 'id="who-signs-in"' in page
    assert "Picnic customers" in page and "Picnic staff" in page and "support console" in page


def test_staff_land_on_the_console(staff_client):
    response = staff_client.get("/")
    assert response.status_code == 302 and response["Location"] == "/staff/"


def test_an_end_user_sees_their_requests_and_passkeys_not_the_admin(
    client, user, other_user, application
):
    mine = make_action(user=user, application=application)
    theirs = make_action(user=other_user, application=application)
    client.force_login(user)
    response = client.get("/")
    assert response.status_code == 200
    text = response.text
    assert f'data-action="{mine.pk}"' in text and f'href="/sign/{mine.pk}/"' in text
    assert str(theirs.pk) not in text
    assert "Waiting for your approval: 1" in text
    assert 'data-status="' not in text  # the list's badges are not the page's status
    assert 'class="badge badge-flight"' in text and "Waiting for your approval" in text
    assert "Passkeys that can approve your payments: 0." in text
    assert "/admin/" not in text
    assert mine.status == ActionStatus.PROPOSED


def test_the_front_door_is_in_the_users_language(client, user, application):
    make_action(user=user, application=application)
    client.force_login(user)
    text = client.get("/", HTTP_ACCEPT_LANGUAGE="pt-BR").text
    assert "Sua atividade" in text and "Aguardando sua aprovação" in text
